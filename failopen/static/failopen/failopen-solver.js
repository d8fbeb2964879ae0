// failopen's fallback solver: a Web Worker that failopen.js starts only when a route's outage
// policy is "fallback". It asks the server for an ALTCHA (v1) challenge, finds with WebCrypto the
// number whose SHA-256(salt + number) is the challenge, and posts back what the server verifies:
// base64(JSON {algorithm, challenge, number, salt, signature}). Posts 0 when the server enforces
// again (409), '' when every try failed. No eval, no import: it runs under
// "script-src 'self'; worker-src 'self'".
'use strict';

// Digests asked for at once: each one is asynchronous, and waiting on them one by one costs
// more than the hashing.
const BATCH = 1024;

onmessage = async e => {
  const [url, retries, delayMs] = e.data;
  for (let i = 0; i <= retries; i++) {
    try {
      if (i) await new Promise(go => setTimeout(go, delayMs * i));
      // A challenge that does not come in 10 s is asked for again, not waited on.
      const stop = new AbortController(), timer = setTimeout(() => stop.abort(), 1e4);
      const r = await fetch(url, {cache: 'no-store', signal: stop.signal});
      if (r.status == 409) return postMessage(0);
      if (!r.ok || r.redirected) throw new Error('challenge: HTTP ' + r.status);
      const c = await r.json(), alive = lifetime(c.salt);
      clearTimeout(timer);
      const number = alive() && await find(c);
      // Expired before it could be sent: the server would refuse it; ask for another.
      if (typeof number != 'number' || !alive()) throw new Error('no answer in time');
      return postMessage(btoa(JSON.stringify({algorithm: c.algorithm, challenge: c.challenge,
        number, salt: c.salt, signature: c.signature})));
    } catch (err) {
      console.debug('[failopen] solve', String(err));
    }
  }
  postMessage('');
};

// The salt says when the challenge expires ("...?expires=<unix s>&issued=<unix s>&"). With
// issued, its lifetime counts from now on this clock, which may be wrong by minutes; without,
// the expiry is read on this clock.
function lifetime(salt) {
  const q = new URLSearchParams(String(salt).split('?')[1] || '');
  const expires = +q.get('expires') * 1e3, issued = +q.get('issued') * 1e3;
  const end = !expires ? Infinity : issued ? Date.now() + expires - issued : expires;
  return () => Date.now() < end;
}

async function find(c) {
  const max = +(c.maxnumber || c.maxNumber || 1e6), salt = c.salt;
  const encoder = new TextEncoder(), algorithm = c.algorithm || 'SHA-256';
  // Compared as bytes: a hex string per digest would cost more than the digest.
  const want = new Uint8Array(String(c.challenge).match(/../g).map(h => parseInt(h, 16)));
  const same = digest => {
    const got = new Uint8Array(digest);
    return got.length == want.length && got.every((b, i) => b == want[i]);
  };
  for (let n = 0; n <= max; n += BATCH) {
    const digests = [];
    for (let k = n; k <= max && k < n + BATCH; k++) {
      digests.push(crypto.subtle.digest(algorithm, encoder.encode(salt + k)));
    }
    const found = (await Promise.all(digests)).findIndex(same);
    if (found >= 0) return n + found;
  }
  return null;
}
