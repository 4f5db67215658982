// dlq console: small conveniences on top of plain forms. Everything works
// without it; the Content-Security-Policy allows no other script.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // "Select every message on this page" ticks the rows' boxes.
  document.querySelectorAll("input[data-select-page]").forEach(function (all) {
    all.addEventListener("change", function () {
      all.form.querySelectorAll('input[name="id"]').forEach(function (box) { box.checked = all.checked; });
    });
  });
  // "All matching this filter" stands for every row, so the row boxes
  // are greyed out while it is ticked (the server ignores them then).
  document.querySelectorAll('input[data-test="select-all-matching"]').forEach(function (all) {
    all.addEventListener("change", function () {
      all.form.querySelectorAll('input[name="id"], input[data-select-page]').forEach(function (box) { box.disabled = all.checked; });
    });
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
});
// A session that ended while a page polled: go to the sign-in form.
document.addEventListener("htmx:responseError", function (e) {
  if (e.detail.xhr && e.detail.xhr.status === 401) { window.location.assign("/ui/"); }
});
