// failopen.js's adapter for hCaptcha. It stands in for the spec's vendor script (data-callback,
// setConfig, run, reset), so the snippet's watchdog, retries and confirm apply as they are. Each
// adapter stands alone: only the configured one is loaded.
(() => {
  const me = document.currentScript, o = me.o, w = window, H = () => w.hcaptcha;
  const done = 'failopenHcaptcha' + Math.random().toString(36).slice(2);
  const hide = o.widget == 'invisible';
  let h, id, box;
  w[me.getAttribute('data-callback')]({
    setConfig(x) {
      h = x;
      w[done] = render;
      if (H()) return render();
      const s = document.createElement('script');
      // recaptchacompat=off: no window.grecaptcha of hCaptcha's beside a real one.
      s.src = o.vendorUrl.replace(/\/+$/, '') + '/1/api.js?render=explicit&recaptchacompat=off' +
        '&onload=' + done;
      s.onerror = () => me.onerror && me.onerror(); // the snippet's watchdog: load error
      s.nonce = me.nonce;
      document.head.appendChild(s);
    },
    // A checkbox waits for the person's click: show it to them.
    run: () => hide ? H().execute(id) : box.scrollIntoView(),
    reset: () => H().reset(id),
  });

  // Into the page's [data-failopen-captcha] (in the form, else anywhere), else a box we add
  // before the form's submit button. A fresh element each time: a reload renders anew.
  function render() {
    const f = o.form, d = document, m = f && f.querySelector('[data-failopen-captcha]') ||
      d.querySelector('[data-failopen-captcha]');
    box = d.createElement('div');
    if (m) m.replaceChildren(box);
    else if (f) {
      const b = f.querySelector('[type=submit],button:not([type])');
      b ? b.before(box) : f.append(box);
    }
    id = H().render(box, {sitekey: o.publicKey, size: hide ? 'invisible' : 'normal',
      callback: token => (detach(), h.onCompleted({token})),
      'error-callback': e => h.onError(e),
      'chalexpired-callback': () => h.onError('challenge-expired'),
      // No close-callback: a person who dismissed the challenge ticks the box again, and the
      // held submit goes then.
      'expired-callback': () => h.onExpired()});
    detach();
    h.onReady();
  }

  // hCaptcha's own fields leave the form (form="" names no form): the snippet sends the token
  // in one field of its own, never beside an empty one of the same name.
  function detach() {
    for (const e of box.querySelectorAll('textarea,input')) e.setAttribute('form', '');
  }
})();
