// Vane console: confirmation of critical toggles, live refresh, rollout sums, parts drawn apart.
// Every form also works without this script (the server asks for confirmation itself).
"use strict";
(function () {
  var dialog = document.getElementById("confirm");

  // a critical toggle asks first: a form's data-confirm, or its sender's (the flags list is one
  // form whose switches each carry their own); confirmed, the same sender sends it again
  function ask(form, by, text) {
    if (!text || !dialog || typeof dialog.showModal !== "function") { return false; }
    document.getElementById("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue === "ok") {
        form.querySelector("input[name=confirm]").value = "yes";
        if (by && form.requestSubmit) { form.requestSubmit(by); } else { form.submit(); }
      }
    };
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
    return true;
  }

  document.addEventListener("submit", function (event) {
    var form = event.target, by = event.submitter || null;
    var asking = by && by.hasAttribute("data-confirm") ? by : form;
    var confirmed = form.querySelector("input[name=confirm]");
    if (asking.hasAttribute("data-confirm") && confirmed && confirmed.value !== "yes") {
      if (ask(form, by, asking.getAttribute("data-confirm"))) { event.preventDefault(); }
    }
  });

  // rollout editors: the sum of the weights as they are typed
  function sums() {
    document.querySelectorAll("[data-weights]").forEach(function (box) {
      var total = 0;
      box.querySelectorAll("input[name^=weights]").forEach(function (input) {
        var n = parseFloat(input.value); if (!isNaN(n)) { total += n; }
      });
      var out = box.querySelector("[data-sum]");
      if (out) { out.textContent = (Math.round(total * 1000) / 1000) + "% of 100%"; }
    });
  }
  document.addEventListener("input", sums);

  // a form's fieldset for one kind only (data-kind, e.g. a management key's role): shown and
  // sent while the form's kind is that one; without this script it is always shown and sent
  function kinds(root) {
    root.querySelectorAll("fieldset[data-kind]").forEach(function (box) {
      var form = box.closest("form"), chosen = form && form.querySelector("select[name=kind]");
      if (chosen) { box.hidden = box.disabled = chosen.value !== box.getAttribute("data-kind"); }
    });
  }
  kinds(document);
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("select[name=kind]")) { kinds(document); }
  });

  // parts drawn apart (data-load): fetched after the page, so that what it shows first comes
  // first; without this script each is a link to a page of its own
  function parts(root) {
    root.querySelectorAll("[data-load]").forEach(function (box) {
      fetch(box.getAttribute("data-load"), { headers: { "X-Vane-Fragment": "part" }, credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) { if (html !== null) { box.innerHTML = html; box.setAttribute("data-loaded", "1"); } })
        .catch(function () {});
    });
  }
  parts(document);

  // what goes into <main>: the fragment a page sends, or the <main> of a whole page
  function mainOf(html) {
    var found = new DOMParser().parseFromString(html, "text/html").getElementById("main");
    return found ? found.innerHTML : html;
  }

  // live: a change anywhere in the project refreshes this page's main content, unless a form
  // on it is being edited (focus inside main on an input), when it waits for the next change
  var live = document.body.getAttribute("data-live");
  if (!live || !window.EventSource) { return; }
  var busy = false, again = false;
  function editing() {
    var active = document.activeElement;
    return active && active.closest("main") && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) &&
      !(active.form && active.form.getAttribute("method") === "get");
  }
  function refresh() {
    if (busy) { again = true; return; }
    if (editing() || (dialog && dialog.open)) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { "X-Vane-Fragment": "main" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null && !editing()) {
          var main = document.getElementById("main");
          main.innerHTML = mainOf(html);
          parts(main);
          kinds(main);
          document.body.setAttribute("data-version", String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource(live);
  source.addEventListener("change", refresh);
  source.addEventListener("open", function () { document.body.setAttribute("data-live-open", "1"); });
  // the console session ended (signed out, deactivated, idle): to the sign-in page, then back
  source.addEventListener("signed-out", function () {
    source.close();
    location.assign("/console/sign-in?next=" + encodeURIComponent(location.pathname + location.search));
  });
  document.addEventListener("focusout", function () { if (again) { setTimeout(refresh, 50); } });
})();
