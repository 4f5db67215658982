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
});
// A session that ended while a page polled: go to the sign-in form.
document.addEventListener("htmx:responseError", function (e) {
  if (e.detail.xhr && e.detail.xhr.status === 401) { window.location.assign("/ui/"); }
});
