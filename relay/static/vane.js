/* Vane browser tracker: flags, element and cta experiments, events. No dependencies, no eval.
 * <script src="https://relay.example.com/sdk/v1/vane.js" data-key="pk_live_..."></script>
 * Guide: docs/browser.md. Types: vane.d.ts (GET /sdk/v1/vane.d.ts). */
(() => {
  "use strict";
  const w = window, d = document, doc = d.documentElement, old = w.vane;
  if (old && old.version) return; // loaded twice
  const me = d.currentScript || d.querySelector("script[data-key][src*='/sdk/v1/vane.js']");
  const ds = (me && me.dataset) || {};
  const KEY = ds.key || "";
  const BASE = me ? me.src.replace(/\/sdk\/v1\/vane\.js.*$/, "") : "";
  const bound = parseInt(ds.antiFlickerMs, 10);
  const BOUND = bound >= 0 ? bound : 1000;
  const OBSERVE_MS = 10000, SESSION_MS = 1800000, MAX_Q = 200, BATCH = 50, DELAY = 1000;

  let logged = 0;
  const log = (e) => {
    if (!logged++) try { console.warn("vane:", e); } catch (_) { /* no console */ }
  };
  const guard = (f) => function () {
    try { return f.apply(this, arguments); } catch (e) { log(e); }
  };
  const store = (k, v) => {
    try {
      if (v === undefined) return localStorage.getItem(k);
      if (v === null) localStorage.removeItem(k);
      else localStorage.setItem(k, v);
    } catch (_) { /* storage off */ }
  };
  const cookie = (v, age) => {
    try {
      if (v === undefined) {
        const c = d.cookie.split("; ").find((s) => s.startsWith("vane_id="));
        return c && decodeURIComponent(c.slice(8));
      }
      d.cookie = "vane_id=" + encodeURIComponent(v) + "; path=/; max-age=" + age + "; SameSite=Lax";
    } catch (_) { /* cookies off */ }
  };
  const rid = () => {
    const a = new Uint8Array(12);
    crypto.getRandomValues(a);
    return Array.from(a, (b) => (b + 256).toString(16).slice(1)).join("");
  };
  const here = () => location.origin + location.pathname;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ------------------------------------------------------------------- identity and consent
  let consent = ds.consent !== "pending";
  const visitor = cookie() || store("vane_id") || rid();
  let unit = ds.unit || visitor;
  let kinds = {}; // {organization: {key, ...attributes}}; "user": the unit's own attributes
  const units = () => {
    const o = {};
    for (const k in kinds) if (k !== "user") o[k] = kinds[k].key;
    return o;
  };
  const context = () => {
    const { key: _, ...mine } = kinds.user || {};
    return Object.keys(units()).length
      ? Object.assign({ kind: "multi" }, kinds, { user: Object.assign(mine, { key: unit }) })
      : Object.assign(mine, { targetingKey: unit });
  };
  // keepalive: an exposure is sent as the variant is shown, and must outlive a visitor who
  // leaves at once. ts: this page's clock, as its events' (a goal after it stays after it)
  const assign = (key, t = Date.now()) => post("/sdk/v1/experiments/" + encodeURIComponent(key) +
    "/assign", { unit, units: units(), context: context(), url: location.href, ts: t, sentAt: t }, true);
  let sess = (store("vane_s") || "").split(".");
  const remember = () => {
    if (!consent) return;
    cookie(visitor, 63072000);
    store("vane_id", visitor);
  };
  const session = () => {
    const now = Date.now();
    if (!sess[0] || !(now - sess[1] <= SESSION_MS)) sess = [rid(), now]; // NaN: a new one
    sess[1] = now;
    if (consent) store("vane_s", sess.join("."));
    return sess[0];
  };

  // --------------------------------------------------------------------------------- http
  // The key in the query and a text/plain body make a CORS "simple" request: no preflight.
  const post = (path, body, keepalive) =>
    fetch(BASE + path + "?key=" + encodeURIComponent(KEY), {
      method: "POST",
      body: JSON.stringify(body),
      credentials: "omit",
      keepalive: !!keepalive,
    }).then((r) => {
      if (r.ok) return r.json();
      const e = new Error(path + ": HTTP " + r.status);
      e.status = r.status;
      throw e;
    });

  // ---------------------------------------------------------------------------------- flags
  let flags = {}, loaded = 0, stream = null;
  const handlers = { change: [] };
  const emit = (name, arg) => {
    for (const cb of handlers[name] || []) try { cb(arg); } catch (e) { log(e); }
  };
  const loadFlags = () =>
    post("/ofrep/v1/evaluate/flags", { context: context() }).then((r) => {
      const next = {}, changed = {};
      for (const f of r.flags || []) if (!f.errorCode) next[f.key] = f.value;
      if (loaded++) {
        for (const k of new Set([...Object.keys(flags), ...Object.keys(next)])) {
          if (JSON.stringify(flags[k]) !== JSON.stringify(next[k])) changed[k] = next[k];
        }
      }
      flags = next;
      if (Object.keys(changed).length) emit("change", changed);
      const sse = (r.eventStreams || []).find((s) => s.type === "sse");
      if (sse && !stream && w.EventSource) listen(sse.url);
    });
  const listen = (url) => {
    stream = new EventSource(url);
    stream.onmessage = guard((m) => {
      if (JSON.parse(m.data).type === "refetchEvaluation") loadFlags().catch(log);
    });
    stream.onerror = () => {
      if (stream && stream.readyState === 2) { // closed for good (token expired): a fresh URL
        stream = null;
        sleep(5000).then(() => loadFlags()).catch(log);
      }
    };
  };

  // ---------------------------------------------------------------------------- experiments
  let running = [], sheet = null, mo = null, moTimer = 0;
  let seen = new WeakMap(); // element -> "key:variant" handled
  const applied = new Map(); // element -> [tag, original children, href, background, colour, our text node, its text]
  const shown = new Set();
  const early = new Set(); // swapped while the parser could still add to them: looked at again
  const hide = (selectors) => {
    const rules = selectors.map((s) => s + "{visibility:hidden!important}");
    if (!rules.length) return;
    try {
      sheet = new CSSStyleSheet();
      for (const r of rules) try { sheet.insertRule(r); } catch (_) { /* bad selector */ }
      d.adoptedStyleSheets = [...d.adoptedStyleSheets, sheet];
    } catch (_) {
      sheet = d.createElement("style");
      sheet.textContent = rules.join("");
      (d.head || doc).appendChild(sheet);
    }
    setTimeout(unhide, BOUND);
  };
  const unhide = () => {
    if (!sheet) return;
    if (sheet.nodeType) sheet.remove();
    else d.adoptedStyleSheets = d.adoptedStyleSheets.filter((s) => s !== sheet);
    sheet = null;
  };
  const prefetch = () => { // {selectors, experiments}: the page's experiments for this unit
    if (!consent || !KEY || d.readyState !== "loading") return {};
    try {
      const x = new XMLHttpRequest(); // synchronous on purpose: see docs/browser.md
      const q = "?key=" + encodeURIComponent(KEY) + "&url=" + encodeURIComponent(here()) +
        "&unit=" + encodeURIComponent(unit);
      x.open("GET", BASE + "/sdk/v1/selectors" + q, false);
      x.send();
      return x.status === 200 ? JSON.parse(x.responseText) : {};
    } catch (e) {
      log(e);
      return {};
    }
  };
  const expose = (key) => assign(key).catch(log);
  const swap = (el, x, tag) => {
    let saved = applied.get(el);
    if (!saved) {
      saved = [tag, [...el.childNodes], el.getAttribute("href"), el.style.backgroundColor, el.style.color, null];
      applied.set(el, saved);
    } else if (early.has(el)) { // what the parser added since the swap is the original's rest
      for (const n of [...el.childNodes]) {
        if (n !== saved[5]) saved[1].push(n);
        else if (n.data.length > saved[6].length) saved[1].push(d.createTextNode(n.data.slice(saved[6].length)));
      }
    }
    saved[0] = tag;
    if (x.content) {
      el.textContent = x.content;
      saved[5] = el.firstChild; // the parser appends an element's late text to this node
      saved[6] = x.content;
    }
    if (x.href && !/^\s*javascript:/i.test(x.href)) el.setAttribute("href", x.href);
    if (x.bg) el.style.backgroundColor = x.bg;
    if (x.color) el.style.color = x.color;
  };
  const apply = () => {
    for (const x of running) {
      if (!x.selector) continue;
      const tag = x.key + ":" + x.variant;
      let els = [];
      try { els = d.querySelectorAll(x.selector); } catch (_) { /* bad selector */ }
      for (const el of els) {
        const loading = d.readyState === "loading";
        const again = (loading || early.has(el)) && x.content && el.textContent !== x.content;
        if (seen.get(el) === tag && !again) continue;
        seen.set(el, tag);
        if (loading) early.add(el);
        if (x.content || x.href || x.bg || x.color) swap(el, x, tag);
        if (!shown.has(x.key)) {
          shown.add(x.key);
          expose(x.key);
        }
      }
    }
  };
  const restore = (keep) => {
    for (const [el, [tag, nodes, href, bg, color]] of applied) {
      if (!el.isConnected) applied.delete(el); // gone with a view the app replaced
      if (!el.isConnected || keep.has(tag)) continue;
      el.replaceChildren(...nodes);
      if (href == null) el.removeAttribute("href");
      else el.setAttribute("href", href);
      el.style.backgroundColor = bg;
      el.style.color = color;
      applied.delete(el);
      seen.delete(el);
    }
  };
  const observe = () => {
    if (!mo && w.MutationObserver) {
      mo = new MutationObserver(guard(apply));
      mo.observe(doc, { childList: true, subtree: true, characterData: true });
    }
    clearTimeout(moTimer);
    moTimer = setTimeout(() => {
      if (mo) mo.disconnect();
      mo = null;
    }, OBSERVE_MS);
  };
  const run = (experiments) => {
    running = experiments || [];
    restore(new Set(running.map((x) => x.key + ":" + x.variant)));
    apply();
  };
  const loadExperiments = () =>
    post("/sdk/v1/experiments", { unit, units: units(), url: here(), expose: false }).then((r) => run(r.experiments));
  d.addEventListener("click", guard((e) => {
    const t = e.target;
    if (!t || !t.closest) return;
    let hit = 0;
    for (const x of running) {
      if (x.type !== "cta" || !x.selector) continue;
      try {
        if (t.closest(x.selector)) {
          track(x.goal || "cta_click", { experiment: x.key, variant: x.variant });
          hit = 1;
        }
      } catch (_) { /* bad selector */ }
    }
    if (hit) flush(1);
  }), true);

  // -------------------------------------------------------------------------------- events
  let queue = [], timer = 0;
  if (consent) try { queue = JSON.parse(store("vane_q") || "[]"); } catch (_) { queue = []; }
  const save = () => {
    if (consent) store("vane_q", queue.length ? JSON.stringify(queue) : null);
  };
  const track = (name, props) => {
    if (typeof name !== "string" || !name || name[0] === "$") {
      throw new Error("track: the event name must be a string not starting with $");
    }
    const p = Object.assign({}, props);
    const e = { unit, event: name, eventId: rid(), ts: Date.now(), url: location.href };
    for (const k of ["value", "currency", "eventId", "unitKind"]) {
      if (p[k] != null) e[k] = p[k];
      delete p[k];
    }
    if (e.unitKind) { // the event is of another kind's unit: an organization's, say
      if (!kinds[e.unitKind]) throw new Error("track: identify a unit of kind " + e.unitKind + " first");
      e.unit = kinds[e.unitKind].key;
    }
    if (e.value !== undefined && !Number.isSafeInteger(e.value)) {
      throw new Error("track: value must be an integer in minor units (cents)");
    }
    e.eventId = String(e.eventId);
    p.$session = session();
    e.props = p;
    queue.push(e);
    if (queue.length > MAX_Q) queue.splice(0, queue.length - MAX_Q);
    save();
    if (queue.length >= BATCH) flush();
    else if (!timer) timer = setTimeout(flush, DELAY);
  };
  let sending = 0;
  const flush = (leaving) => {
    clearTimeout(timer);
    timer = 0;
    if (!consent || !queue.length || !KEY) return;
    if (leaving) { // the page may be gone before a fetch answers: hand over what fits now
      const batch = [];
      let size = 0;
      for (const e of queue) { // beacons and keepalive requests carry at most 64 KiB
        size += JSON.stringify(e).length + 1;
        if (batch.length && size > 60000) break;
        batch.push(e);
      }
      const url = BASE + "/sdk/v1/events?key=" + encodeURIComponent(KEY);
      let sent = false;
      try { sent = navigator.sendBeacon(url, JSON.stringify({ events: batch, sentAt: Date.now() })); } catch (_) { /* none */ }
      if (sent) {
        queue = queue.slice(batch.length); // the rest waits for the next page view
        save();
      } else { // kept until acknowledged: a resend on the next page view is counted once
        const ids = new Set(batch.map((e) => e.eventId));
        post("/sdk/v1/events", { events: batch, sentAt: Date.now() }, true).then(() => {
          queue = queue.filter((e) => !ids.has(e.eventId));
          save();
        }, log);
      }
      return;
    }
    if (sending) return;
    const batch = queue.slice(0, BATCH);
    const ids = new Set(batch.map((e) => e.eventId));
    const done = () => {
      queue = queue.filter((e) => !ids.has(e.eventId));
      save();
    };
    sending = 1;
    post("/sdk/v1/events", { events: batch, sentAt: Date.now() }, true)
      .then(done, (e) => {
        if (e.status >= 400 && e.status < 500 && e.status !== 429) done(); // never resendable
        log(e);
      })
      .finally(() => {
        sending = 0;
        if (queue.length && !timer) timer = setTimeout(flush, DELAY);
      });
  };
  w.addEventListener("pagehide", () => flush(1));
  d.addEventListener("visibilitychange", () => d.visibilityState === "hidden" && flush(1));

  // ----------------------------------------------------------------------------- lifecycle
  let booting = Promise.resolve();
  const parsed = () =>
    new Promise((r) => (d.readyState === "loading" ? d.addEventListener("DOMContentLoaded", r) : r()));
  const settled = () => {
    unhide();
    try { performance.mark("vane:applied"); } catch (_) { /* no user timing */ }
  };
  const boot = (known) => {
    observe();
    let done = loadExperiments().catch(log); // with a (browser-cached) answer: brings it up to date
    if (known) run(known); // the parser inserts the targeted elements after this: each swapped as it comes
    // the parser appends an element's late text to the node a swap put there: one last look
    const last = parsed().then(guard(() => {
      apply();
      early.clear();
    }));
    if (known) done = last;
    const work = Promise.all([loadFlags().catch(log), done.then(settled)]);
    booting = Promise.race([work, sleep(Math.max(BOUND, 3000))]);
    return booting;
  };
  let path = here();
  const navigated = guard(() => {
    if (here() === path) return;
    path = here();
    if (consent) loadExperiments().catch(log);
    observe();
  });
  for (const m of ["pushState", "replaceState"]) {
    const original = history[m];
    history[m] = function () {
      const r = original.apply(this, arguments);
      navigated();
      return r;
    };
  }
  w.addEventListener("popstate", navigated);

  const api = {
    version: "1",
    ready: () => booting,
    identify: (u, other) => {
      try {
        if (typeof u !== "string" || !u) throw new Error("identify: the unit must be a string");
        const next = {};
        for (const [k, v] of Object.entries(other || {})) {
          next[k] = typeof v === "string" ? { key: v } : Object.assign({}, v);
          if (k !== "user" && (typeof next[k].key !== "string" || !next[k].key)) throw new Error("identify: " + k + " needs a key");
        }
        if (u === unit && JSON.stringify(next) === JSON.stringify(kinds)) return booting;
        unit = u;
        kinds = next;
        seen = new WeakMap();
        shown.clear();
        restore(new Set());
        return consent ? boot() : booting;
      } catch (e) {
        log(e);
        return booting;
      }
    },
    track: guard(track),
    experiment: (key) => {
      if (!consent || !KEY) return Promise.resolve("control");
      return assign(key).then((r) => r.variant, (e) => (log(e), "control"));
    },
    flag: (key, fallback) => (Object.prototype.hasOwnProperty.call(flags, key) ? flags[key] : fallback),
    flags: () => Object.assign({}, flags),
    on: guard((name, cb) => {
      (handlers[name] = handlers[name] || []).push(cb);
      return () => { handlers[name] = handlers[name].filter((f) => f !== cb); };
    }),
    consent: guard((yes) => {
      const was = consent;
      consent = !!yes;
      if (consent && !was) {
        remember();
        session();
        save();
        boot();
        flush();
      } else if (!consent) {
        queue = [];
        clearTimeout(timer);
        cookie("", 0);
        for (const k of ["vane_id", "vane_s", "vane_q"]) store(k, null);
      }
    }),
  };
  Object.defineProperty(api, "unit", { get: () => unit, enumerable: true });
  w.vane = api;

  try {
    if (!KEY) throw new Error("the script tag needs data-key=\"pk_...\"");
    if (consent) {
      remember();
      const page = prefetch();
      hide(page.selectors || []);
      boot(page.experiments);
      d.addEventListener("DOMContentLoaded", observe);
      if (queue.length) flush();
    }
  } catch (e) {
    log(e);
  }
  for (const [name, args, resolve] of (old && old.q) || []) { // calls made before the script loaded
    let out;
    try { out = api[name].apply(api, args); } catch (e) { log(e); }
    if (resolve) resolve(out);
  }
})();
