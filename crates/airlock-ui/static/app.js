// airlock web interface: progressive enhancement only. Every page works
// without this file (forms post, confirmations get their own page); with
// it, confirmations are dialogs, selects apply on change, active lists
// refresh, and a run's log is live. Text from the server is only ever
// inserted as text (textContent), never parsed as HTML, except fragments
// the server rendered (and escaped) for that purpose.
"use strict";
(function () {
  document.documentElement.classList.add("js");
  const csrf = () => {
    const m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  };

  function ready(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  ready(function () {
    // Selects that apply at once.
    document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.requestSubmit(); });
    });

    // Confirmations: a dialog here; without script the server asks on a page.
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (f.dataset.confirmed === "yes") return;
        if (!window.confirm(f.dataset.confirm)) { e.preventDefault(); return; }
        const c = document.createElement("input");
        c.type = "hidden"; c.name = "confirm"; c.value = "yes";
        f.appendChild(c);
        f.dataset.confirmed = "yes";
      });
    });

    // Copy buttons.
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      b.classList.remove("hidden");
      b.addEventListener("click", function () {
        const src = document.querySelector(b.dataset.copy);
        if (!src || !navigator.clipboard) return;
        navigator.clipboard.writeText(src.textContent).then(function () {
          const was = b.textContent;
          b.textContent = "Copied";
          setTimeout(function () { b.textContent = was; }, 1500);
        });
      });
    });

    // Parts of a page that refresh while something is active.
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      const every = Math.max(1, parseInt(el.dataset.refreshEvery || "3", 10)) * 1000;
      const tick = function () {
        if (document.hidden) { setTimeout(tick, every); return; }
        fetch(el.dataset.refresh, { credentials: "same-origin", headers: { "X-CSRF-Token": csrf() } })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) {
            if (html !== null) el.innerHTML = html;
            if (!el.querySelector("[data-active]")) return;
            setTimeout(tick, every);
          })
          .catch(function () { setTimeout(tick, every * 2); });
      };
      if (el.querySelector("[data-active]")) setTimeout(tick, every);
    });

    const log = document.getElementById("log");
    if (log && log.dataset.stream) liveLog(log);
  });

  // A run's log over server-sent events. Lines are appended as text; the
  // page keeps at most data-cap lines and links the full log.
  function liveLog(log) {
    const cap = parseInt(log.dataset.cap || "5000", 10);
    const state = document.getElementById("run-state");
    const pause = document.getElementById("log-follow");
    const filter = document.getElementById("log-filter");
    const search = document.getElementById("log-search");
    const omitted = document.getElementById("log-omitted");
    let follow = true;
    if (pause) {
      pause.classList.remove("hidden");
      pause.addEventListener("click", function () {
        follow = !follow;
        pause.textContent = follow ? "Pause auto-scroll" : "Resume auto-scroll";
        pause.setAttribute("aria-pressed", follow ? "false" : "true");
        if (follow) log.scrollTop = log.scrollHeight;
      });
    }
    const visible = function (line) {
      const f = filter ? filter.value : "all";
      const q = search ? search.value.toLowerCase() : "";
      const okStream = f === "all" || line.dataset.s === f;
      const okText = q === "" || line.textContent.toLowerCase().indexOf(q) >= 0;
      return okStream && okText;
    };
    const apply = function () {
      log.querySelectorAll(".line").forEach(function (l) { l.hidden = !visible(l); });
    };
    if (filter) filter.addEventListener("change", apply);
    if (search) search.addEventListener("input", apply);

    const es = new EventSource(log.dataset.stream);
    es.addEventListener("line", function (e) {
      let d;
      try { d = JSON.parse(e.data); } catch (_) { return; }
      const div = document.createElement("div");
      div.className = "line " + (d.s || "stdout");
      div.dataset.s = d.s || "stdout";
      div.textContent = d.t;
      div.hidden = !visible(div);
      log.appendChild(div);
      let n = log.childElementCount;
      while (n > cap) { log.removeChild(log.firstElementChild); n--; if (omitted) omitted.hidden = false; }
      if (follow) log.scrollTop = log.scrollHeight;
    });
    es.addEventListener("state", function (e) {
      let d;
      try { d = JSON.parse(e.data); } catch (_) { return; }
      if (state && d.state) { state.textContent = d.state; state.className = "state state-" + d.state; }
    });
    es.addEventListener("end", function () {
      es.close();
      if (log.dataset.reloadOnEnd === "yes") window.location.reload();
    });
  }
})();
