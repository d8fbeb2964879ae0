(() => {
  const me = document.currentScript, noop = () => {}, doc = document;
  const D = {flagUrl: '/failopen/flag', publicKey: '', tokenField: 'enforcement-token',
    vendorUrl: '', vendor: '', widget: '', action: '', form: '', challengeUrl: '', solverUrl: '',
    readyTimeoutMs: 1e4, retries: 3, retryDelayMs: 500, onToken: noop, onBypass: noop, onFailure: noop};
  const log = (...a) => console.debug('[failopen]', ...a);
  const add = (f, name) => f.appendChild(doc.createElement(name));
  const put = (f, name, value) => (f.elements[name] ||
    Object.assign(add(f, 'input'), {type: 'hidden', name})).value = value;
  const cb = 'failopenVendor' + Math.random().toString(36).slice(2);
  let o, forms, vendor, tag, timer, held, started, since, loads, errors, policy, where, pass, ch,
    act, fb, asked = 0;
  const F = window.FailOpen = {state: 'checking', init};

  function set(state) {
    since = Date.now();
    log(F.state = state);
    for (const f of forms) f.setAttribute('data-failopen-state', state);
  }

  function init(options) {
    if (started) return;
    started = o = Object.assign({}, D);
    for (const k in D) {
      const v = me.getAttribute('data-failopen-' + k.replace(/[A-Z]/g, '-$&').toLowerCase());
      if (v && D[k] != noop) o[k] = v;
    }
    Object.assign(o, options);
    for (const k in D) if (D[k] > 0) o[k] = +o[k] >= 0 ? +o[k] : D[k];
    doc.readyState == 'loading' ? addEventListener('DOMContentLoaded', start) : start();
  }

  function start() {
    // Unconfigured: forms are left alone; the server decides.
    if (!o.publicKey || !o.vendorUrl) return console.error('[failopen] no publicKey/vendorUrl');
    forms = [...(o.form ? doc.querySelectorAll(o.form) : doc.forms)]
      .filter(f => f.elements && (o.form || f.elements[o.tokenField] ||
        f.querySelector('[data-failopen-captcha]')));
    for (const f of forms) f.addEventListener('submit', onSubmit);
    check();
  }

  const url = (u, base) => new URL(u, base || doc.baseURI);
  const at = f => f && url(f.getAttribute('action') || '').pathname;

  // Only JSON {"enforce": false}, unredirected, to the latest ask is off.
  function check(confirm) {
    const n = ++asked;
    set('checking');
    where = at((held || forms)[0]);
    fetch(o.flagUrl + (/\?/.test(o.flagUrl) ? '&' : '?') + 'path=' +
      encodeURIComponent(where || '') + (confirm ? '&confirm=1' : ''), {cache: 'no-store'})
      .then(r => r.ok && !r.redirected && r.json())
      .then(j => !!j && (act = j.action, fb = j.fallback, j.enforce === false) &&
        (j.outage_policy || 'open'), noop)
      .then(off => {
        if (n != asked) return;
        log('enforce', !off);
        policy = off;
        if (off == 'closed') {
          set('closed');
          held = 0;
          tell('This action is briefly unavailable. Please try again in a few minutes.');
        } else if (off) {
          set('bypassed');
          off != 'fallback' ? release() : fb && fb.vendor != 'altcha' ? confirm ? fail() :
            enforce(fb) : held && solve();
          o.onBypass();
        } else if (confirm) fail();
        else enforce();
      })
      .catch(console.error); // a page callback threw: no unhandled rejection
  }

  function enforce(x) {
    ch = x ? {vendor: x.vendor, publicKey: x.public_key, vendorUrl: x.vendor_url,
      tokenField: x.token_field, widget: x.widget} : o;
    loads = errors = 0;
    load();
  }

  function solve() {
    set('solving');
    try {
      const w = new Worker(o.solverUrl || url('failopen-solver.js', me.src)), f = held[0];
      w.onmessage = w.onerror = e => {
        const x = e.data;
        w.terminate();
        if (x === 0) return enforce();
        if (!x) return fail();
        put(f, 'altcha', x);
        set('bypassed');
        release();
      };
      w.postMessage([url(o.challengeUrl || o.flagUrl.replace(/\/flag(?=$|\?)/, '/challenge'))
        .href, o.retries, o.retryDelayMs]);
    } catch (e) {
      log(e);
      fail();
    }
  }

  function load() {
    set('loading');
    if (tag) tag.remove();
    loads++;
    // onFailed: the person failed; never a bypass.
    window[cb] = v => (vendor = v).setConfig({onReady, onCompleted, onError, onFailed: () => {
      log('onFailed');
      held = 0;
    }, onExpired: onCompleted});
    tag = doc.createElement('script');
    // Another vendor's adapter acts as the spec's script.
    const name = ch.vendor;
    tag.src = name ? url('failopen-' + name.replace(/-enterprise|[^a-z-]/g, '') + '.js', me.src)
      : ch.vendorUrl.replace(/\/+$/, '') + '/v2/' + encodeURIComponent(ch.publicKey) +
      '/api.js';
    tag.o = Object.assign({}, ch, {form: (held || forms)[0], action: o.action || act});
    tag.setAttribute('data-callback', cb);
    tag.nonce = me.nonce;
    tag.onerror = () => watchdog('load error');
    timer = setTimeout(watchdog, o.readyTimeoutMs, 'no onReady');
    doc.head.appendChild(tag);
  }

  function watchdog(why) {
    log(why);
    clearTimeout(timer);
    tag.onerror = null;
    tag.remove();
    loads < 2 ? load() : check(1);
  }

  function onReady() {
    if (F.state != 'loading') return;
    clearTimeout(timer);
    set('ready');
    if (held) run();
  }

  function run() {
    log('run');
    vendor.run();
  }

  function onError() {
    if (errors++ < o.retries) {
      log('retry', errors);
      vendor.reset();
      setTimeout(run, o.retryDelayMs);
    } else check(1);
  }

  function onCompleted(r) {
    const token = r && r.token || '';
    for (const f of forms) put(f, ch.tokenField, token);
    if (!token) return F.state == 'completed' && set('ready'); // expired
    set('completed');
    release(); // before a callback that may throw
    o.onToken(token);
  }

  function fail(early) {
    if (!early) {
      set('failed');
      held = 0;
    }
    const s = Math.ceil((since + 6e4 - Date.now()) / 1e3);
    tell('The security check could not load. Please try again in ' +
      (s > 59 ? 'a minute.' : s > 1 ? s + ' seconds.' : '1 second.'));
  }

  function tell(message) {
    say(message);
    o.onFailure(message);
  }

  function say(message) {
    for (const f of forms) {
      const note = f.querySelector('[data-failopen-message]') || add(f, 'p');
      note.setAttribute('data-failopen-message', '');
      note.setAttribute('role', 'alert');
      note.textContent = message;
    }
  }

  function release() {
    const [f, s] = held || [];
    held = 0;
    pass = 1; // this submit, not later ones: a solution is good once
    if (f) f.requestSubmit ? f.requestSubmit(s) : f.submit();
    pass = 0;
  }

  function onSubmit(e) {
    const state = F.state, f = e.currentTarget, age = Date.now() - since,
      fresh = age < 3e4 && where == at(f);
    if (pass || state == 'completed' || state == 'bypassed' && fresh && policy == 'open') return;
    e.preventDefault();
    if (state == 'failed' || state == 'closed') {
      if (state == 'failed' && age < 6e4) return fail(1);
      say('');
    }
    const busy = held;
    held = [f, e.submitter];
    if (busy) return;
    if (state == 'ready') run();
    if (state == 'bypassed' && fresh) solve();
    else if (/bypassed|failed|closed/.test(state)) check();
  }

  const auto = () => started || init();
  doc.readyState == 'loading' || me.defer ? addEventListener('DOMContentLoaded', auto)
    : setTimeout(auto);
})();
