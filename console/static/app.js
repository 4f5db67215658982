// dlq console: small conveniences on top of plain forms. Everything works
// without it; the Content-Security-Policy allows no other script.
"use strict";
(function () {
  // The number of rows ticked, or "all N matching", in the sticky bulk
  // bar of a form with row boxes.
  function countSelected(form) {
    var out = form.querySelector('[data-test="selected-count"]');
    if (!out) { return; }
    var all = form.querySelector('input[data-test="select-all-matching"]');
    if (all && all.checked) {
      out.textContent = "All " + (all.getAttribute("data-count") || "") + " matching selected";
      return;
    }
    var n = form.querySelectorAll('input[name="id"]:checked').length;
    out.textContent = n + " selected";
  }

  // Delegated handlers: they keep working on rows an auto-refresh swapped in.
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (!(t instanceof HTMLInputElement) || !t.form) { return; }
    if (t.hasAttribute("data-select-page")) {
      // "Select every message on this page" ticks the rows' boxes.
      t.form.querySelectorAll('input[name="id"]').forEach(function (box) { box.checked = t.checked; });
    }
    if (t.getAttribute("data-test") === "select-all-matching") {
      // "All matching this filter" stands for every row, so the row boxes
      // are greyed out while it is ticked (the server ignores them then).
      t.form.querySelectorAll('input[name="id"], input[data-select-page]').forEach(function (box) { box.disabled = t.checked; });
    }
    countSelected(t.form);
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form").forEach(countSelected);
    // The edit page's preview is the answer to a POST (the draft travels
    // in the form, too large for an address). Replacing its history entry
    // with the page's own address makes Back and Forward fetch the edit
    // form with GET instead of asking to send the form again.
    if (document.querySelector("form[data-draft-page]") && window.history.replaceState) {
      window.history.replaceState(null, "", window.location.href);
    }
    // "Send this copy" sends the form as it is, and the preview below it
    // shows the form as it was: once the draft changes, only a new
    // preview may send it.
    document.querySelectorAll("form[data-draft-page]").forEach(function (form) {
      var send = form.querySelector("[data-preview-guard]");
      if (!send) { return; }
      var changed = function () {
        if (send.disabled) { return; }
        send.disabled = true;
        var note = document.createElement("span");
        note.className = "muted";
        note.setAttribute("data-test", "preview-stale");
        note.textContent = " Changed since the preview: preview again to send it.";
        send.after(note);
      };
      form.addEventListener("input", changed);
      form.addEventListener("change", changed);
    });
    // The page size and the sort apply as soon as they are chosen.
    document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.requestSubmit(); });
    });
    // Body field filters: "Add" appends an empty row (a copy of one),
    // "Remove" takes its row away (the last one is only emptied, to copy
    // from). Empty rows are left out of the address when the form is sent.
    document.querySelectorAll("[data-field-filters]").forEach(function (box) {
      box.addEventListener("click", function (e) {
        var b = e.target.closest("button");
        if (!b) { return; }
        var rows = box.querySelectorAll(".field-filter");
        if (b.hasAttribute("data-add-field")) {
          var row = rows[rows.length - 1].cloneNode(true);
          row.querySelector("input").value = "";
          box.insertBefore(row, b);
          row.querySelector("input").focus();
        } else if (b.hasAttribute("data-remove-field")) {
          var mine = b.closest(".field-filter");
          if (rows.length > 1) { mine.remove(); } else { mine.querySelector("input").value = ""; }
        }
      });
      box.closest("form").addEventListener("submit", function () {
        box.querySelectorAll('input[name="field"]').forEach(function (i) { i.disabled = i.value.trim() === ""; });
      });
      // Back to this page from the browser's cache: the rows are editable again.
      window.addEventListener("pageshow", function () {
        box.querySelectorAll('input[name="field"]').forEach(function (i) { i.disabled = false; });
      });
    });
    autoRefresh();
  });

  // Auto-refresh. A page the server marks with data-refresh-url is fetched
  // again every 5 seconds with the header X-DLQ-Refresh: 1, which answers
  // its content alone, and each of its [data-refresh] elements is replaced
  // by the one with the same id: no reload, one small request per 5 s at
  // most (the next waits for the last to end). Nothing is replaced while
  // the user types, has a form field focused or rows selected, while a
  // field in a refreshed part holds something other than what the page
  // gave it (a typed reason, a changed choice: until it is put back or its
  // form is sent), or while the tab is hidden; the pause button stops it,
  // per page, for the tab. An answer with X-DLQ-Refresh-Done: 1 (a
  // message whose edited copy has settled) is the last: once swapped in,
  // nothing more is asked. A failed answer with that header (404: the
  // message, task or request was deleted meanwhile) is the last too: its
  // words (what became of the subject) take the page's place, keeping the
  // page's [data-refresh-keep] links (a message's queue), instead of
  // "could not refresh; trying again" for ever.
  var period = 5000;

  // The forms sent from this page: their fields hold what was sent, not
  // unsent changes. Edited again, or the page shown again from the
  // browser's cache, they count again.
  var sent = [];
  document.addEventListener("submit", function (e) {
    if (sent.indexOf(e.target) < 0) { sent.push(e.target); }
  }, true);
  ["input", "change"].forEach(function (type) {
    document.addEventListener(type, function (e) {
      var i = e.target && e.target.form ? sent.indexOf(e.target.form) : -1;
      if (i >= 0) { sent.splice(i, 1); }
    }, true);
  });
  window.addEventListener("pageshow", function (e) { if (e.persisted) { sent = []; } });

  // The option a select shows until the user picks another.
  function defaultIndex(s) {
    var first = -1, last = -1;
    for (var i = 0; i < s.options.length; i++) {
      if (s.options[i].defaultSelected) { last = i; }
      if (first < 0 && !s.options[i].disabled) { first = i; }
    }
    return last >= 0 ? last : first;
  }
  // differs reports whether a field no longer holds its default.
  function differs(f) {
    if (f instanceof HTMLSelectElement) {
      if (!f.multiple) { return f.selectedIndex !== defaultIndex(f); }
      return Array.prototype.some.call(f.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    if (f instanceof HTMLTextAreaElement) { return f.value !== f.defaultValue; }
    switch (f.type) {
      case "hidden": case "submit": case "button": case "reset": case "image": return false;
      case "checkbox": case "radio": return f.checked !== f.defaultChecked;
      case "file": return f.value !== "";
    }
    return f.value !== f.defaultValue;
  }
  // unsent reports whether a field of a refreshed part holds an unsent
  // change, which a refresh would put back to its default.
  function unsent() {
    return Array.prototype.some.call(document.querySelectorAll("[data-refresh][id]"), function (part) {
      return Array.prototype.some.call(part.querySelectorAll("input, textarea, select"), function (f) {
        return !(f.form && sent.indexOf(f.form) >= 0) && differs(f);
      });
    });
  }
  function autoRefresh() {
    var body = document.body;
    var url = body.getAttribute("data-refresh-url");
    var button = document.querySelector('[data-test="auto-refresh"]');
    var label = document.querySelector('[data-test="updated-ago"]');
    if (!url || !button || !label) { return; }
    var key = "dlq-auto-refresh:" + location.pathname;
    var saved = null;
    try { saved = sessionStorage.getItem(key); } catch (e) { /* storage off: the default holds */ }
    var on = saved ? saved === "on" : body.getAttribute("data-live") === "on";
    var last = Date.now(), busy = false, typed = 0, problem = "", done = false, gone = false;

    function blocked() {
      if (document.hidden) { return "while this tab is hidden"; }
      if (Date.now() - typed < 3000) { return "while you type"; }
      var a = document.activeElement;
      if (a && a !== button && a.matches("input, select, textarea, button, summary, [contenteditable]")) {
        return "while a field has focus";
      }
      if (document.querySelector('input[name="id"]:checked, input[data-test="select-all-matching"]:checked')) {
        return "while rows are selected";
      }
      if (unsent()) { return "while a form has unsent changes"; }
      // A row moved under the pointer between aiming and clicking would
      // take the click: Approve or Cancel on another request or task.
      if (document.querySelector("[data-refresh] :is(button, input[type=submit]):hover")) {
        return "while the pointer is on a control";
      }
      return "";
    }
    function show() {
      if (done) {
        button.hidden = true;
        var ago = Math.round((Date.now() - last) / 1000);
        label.textContent = "Updated " + (ago < 1 ? "just now" : ago + " s ago") + " · auto-refresh stopped: " +
          (gone ? "what this page showed no longer exists" : "nothing left to follow");
        return;
      }
      button.textContent = on ? "Pause auto-refresh" : "Resume auto-refresh";
      button.setAttribute("data-state", on ? "on" : "off");
      var secs = Math.round((Date.now() - last) / 1000);
      var text = "Updated " + (secs < 1 ? "just now" : secs + " s ago");
      if (problem) {
        text += " · " + problem;
      } else if (!on) {
        text += " · auto-refresh off";
      } else {
        var why = blocked();
        if (why) { text += " · paused " + why; }
      }
      label.textContent = text;
    }
    // showGone puts the answer of a page whose subject is gone in the
    // page's place, below the refresh controls, after the page's kept links.
    function showGone(doc) {
      var main = document.getElementById("main");
      var nav = doc.getElementById("nav-approvals"), here = document.getElementById("nav-approvals");
      if (nav && here) { here.replaceWith(document.importNode(nav, true)); }
      if (nav) { nav.remove(); }
      var keep = main.querySelectorAll(".live, [data-refresh-keep]");
      main.textContent = "";
      keep.forEach(function (el) { main.appendChild(el); });
      Array.prototype.forEach.call(doc.body.childNodes, function (n) { main.appendChild(document.importNode(n, true)); });
      problem = "";
      done = gone = true;
    }
    function refresh() {
      busy = true;
      var final = false, missing = false;
      fetch(url, { headers: { "X-DLQ-Refresh": "1" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401) { window.location.assign("/ui/"); throw new Error("signed out"); }
          final = r.headers.get("X-DLQ-Refresh-Done") === "1";
          if (!r.ok && !final) { throw new Error("HTTP " + r.status); }
          missing = !r.ok;
          return r.text();
        })
        .then(function (html) {
          // The user may have started something while it was on its way.
          if (blocked()) { return; }
          var doc = new DOMParser().parseFromString(html, "text/html");
          if (missing) { showGone(doc); return; }
          document.querySelectorAll("[data-refresh][id]").forEach(function (el) {
            var fresh = doc.getElementById(el.id);
            if (!fresh) { return; }
            var node = document.importNode(fresh, true);
            el.replaceWith(node);
            if (window.htmx) { window.htmx.process(node); }
          });
          document.querySelectorAll("form").forEach(countSelected);
          problem = "";
          // Only once swapped in: an answer held back (the user busy)
          // is asked again, so the page does not stop on stale parts.
          if (final) { done = true; }
        })
        .catch(function (e) {
          problem = "could not refresh (" + e.message + "); trying again";
        })
        .finally(function () {
          last = Date.now();
          busy = false;
          show();
        });
    }
    button.hidden = false;
    button.addEventListener("click", function () {
      on = !on;
      try { sessionStorage.setItem(key, on ? "on" : "off"); } catch (e) { /* storage off */ }
      show();
    });
    document.addEventListener("keydown", function (e) {
      if (e.target !== button) { typed = Date.now(); }
    });
    setInterval(function () {
      if (on && !done && !busy && Date.now() - last >= period && !blocked()) { refresh(); }
      show();
    }, 1000);
    show();
  }
})();
// A session that ended while a page polled: go to the sign-in form.
document.addEventListener("htmx:responseError", function (e) {
  if (e.detail.xhr && e.detail.xhr.status === 401) { window.location.assign("/ui/"); }
});
