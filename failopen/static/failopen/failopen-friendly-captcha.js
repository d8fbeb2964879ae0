// failopen.js's adapter for Friendly Captcha v2 (its SDK's site script). It stands in for the
// spec's vendor script (data-callback, setConfig, run, reset), so the snippet's watchdog,
// retries and confirm apply as they are. Each adapter stands alone: only the configured one is
// loaded.
(() => {
  const me = document.currentScript, o = me.o, w = window, F = () => w.frcaptcha;
  const hide = o.widget == 'invisible';
  let h, widget, box;
  w[me.getAttribute('data-callback')]({
    setConfig(x) {
      h = x;
      if (F()) return render();
      const s = document.createElement('script');
      s.src = o.vendorUrl.replace(/\/+$/, '') + '/npm/@friendlycaptcha/sdk@0.2.0/site.compat.min.js';
      s.onload = () => F() && render(); // no SDK: the snippet's watchdog, as for no onReady
      s.onerror = () => me.onerror && me.onerror(); // the snippet's watchdog: load error
      s.nonce = me.nonce;
      document.head.appendChild(s);
    },
    run: () => hide ? widget.start() : box.scrollIntoView(),
    reset: () => widget.reset(),
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
    widget = F().createWidget({element: box, sitekey: o.publicKey,
      startMode: hide ? 'none' : 'auto'});
    box.addEventListener('frc:widget.complete', e => (detach(),
      h.onCompleted({token: e.detail.response})));
    box.addEventListener('frc:widget.error', e => h.onError(e.detail && e.detail.error));
    box.addEventListener('frc:widget.expire', () => h.onExpired());
    detach();
    h.onReady();
  }

  // The widget's own field leaves the form (form="" names no form): the snippet sends the token
  // in one field of its own, never beside an empty one of the same name.
  function detach() {
    for (const e of box.querySelectorAll('textarea,input')) e.setAttribute('form', '');
  }
})();
