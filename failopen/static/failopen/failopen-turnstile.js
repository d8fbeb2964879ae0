// failopen.js's adapter for Cloudflare Turnstile. It stands in for the spec's vendor script
// (data-callback, setConfig, run, reset), so the snippet's watchdog, retries and confirm apply
// as they are; it renders the widget with the site key into the form, and Turnstile's own field
// stays out of the form (response-field: false): the snippet sends the token, once.
(() => {
  const me = document.currentScript, o = me.o, w = window, T = () => w.turnstile;
  const done = 'failopenTurnstile' + Math.random().toString(36).slice(2);
  const hide = o.widget == 'invisible';
  let h, id, box;
  w[me.getAttribute('data-callback')]({
    setConfig(x) {
      h = x;
      w[done] = render;
      if (T()) return render();
      const s = document.createElement('script');
      s.src = o.vendorUrl.replace(/\/+$/, '') + '/turnstile/v0/api.js?render=explicit&onload=' +
        done;
      s.onerror = () => me.onerror && me.onerror(); // the snippet's watchdog: load error
      s.nonce = me.nonce;
      document.head.appendChild(s);
    },
    run: () => hide ? T().execute(box) : box.scrollIntoView(),
    reset: () => T().reset(id),
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
    const p = {sitekey: o.publicKey, 'response-field': false, retry: 'never',
      execution: hide ? 'execute' : 'render', appearance: hide ? 'interaction-only' : 'always',
      callback: token => h.onCompleted({token}),
      // Handled (true): Turnstile would otherwise throw; the snippet resets and retries.
      'error-callback': e => (h.onError(e), true),
      'timeout-callback': () => h.onError('timeout'),
      'expired-callback': () => h.onExpired()};
    if (o.action) p.action = o.action;
    id = T().render(box, p);
    h.onReady();
  }
})();
