// failopen.js's adapter for reCAPTCHA v2 (checkbox, invisible) and v3 (widget "score"), and
// reCAPTCHA Enterprise (grecaptcha.enterprise). It stands in for the spec's vendor script
// (data-callback, setConfig, run, reset), so the snippet's watchdog, retries and confirm apply
// as they are. Each adapter stands alone: only the configured one is loaded.
(() => {
  const me = document.currentScript, o = me.o, w = window, key = o.publicKey;
  const E = o.vendor == 'recaptcha-enterprise', G = () => E ? w.grecaptcha.enterprise : w.grecaptcha;
  const done = 'failopenRecaptcha' + Math.random().toString(36).slice(2);
  const score = o.widget == 'score', hide = o.widget == 'invisible';
  let h, id, box;
  w[me.getAttribute('data-callback')]({
    setConfig(x) {
      h = x;
      w[done] = render;
      if (w.grecaptcha && G()) return render();
      const s = document.createElement('script');
      s.src = o.vendorUrl.replace(/\/+$/, '') + (E ? '/recaptcha/enterprise.js' : '/recaptcha/api.js') +
        '?render=' + (score ? encodeURIComponent(key) : 'explicit') + '&onload=' + done;
      s.onerror = () => me.onerror && me.onerror(); // the snippet's watchdog: load error
      s.nonce = me.nonce;
      document.head.appendChild(s);
    },
    // v3: a token for the route's action, on submit (it lives two minutes). A checkbox waits
    // for the person's click: show it to them.
    run: () => score ? G().execute(key, {action: o.action || 'submit'}).then(token => {
      h.onCompleted({token});
      setTimeout(h.onExpired, 11e4);
    }, e => h.onError(e)) : hide ? G().execute(id) : box.scrollIntoView(),
    reset: () => score || G().reset(id),
  });

  // Into the page's [data-failopen-captcha] (in the form, else anywhere), else a box we add
  // before the form's submit button. A fresh element each time: a reload renders anew.
  function render() {
    if (score) return G().ready(() => h.onReady());
    const f = o.form, d = document, m = f && f.querySelector('[data-failopen-captcha]') ||
      d.querySelector('[data-failopen-captcha]');
    box = d.createElement('div');
    if (m) m.replaceChildren(box);
    else if (f) {
      const b = f.querySelector('[type=submit],button:not([type])');
      b ? b.before(box) : f.append(box);
    }
    id = G().render(box, {sitekey: key, size: hide ? 'invisible' : 'normal',
      callback: token => (detach(), h.onCompleted({token})),
      'error-callback': () => h.onError('error'),
      'expired-callback': () => h.onExpired()});
    detach();
    h.onReady();
  }

  // reCAPTCHA's own field leaves the form (form="" names no form): the snippet sends the token
  // in one field of its own, never beside an empty one of the same name.
  function detach() {
    for (const e of box.querySelectorAll('textarea,input')) e.setAttribute('form', '');
  }
})();
