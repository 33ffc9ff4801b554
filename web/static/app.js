// baton web: the little script there is, served as a file (the CSP allows
// no inline script). The pages work without it.
'use strict';
(function () {
  // Says the script ran (the CSP let it); the refresh box shows only then.
  document.documentElement.classList.add('js');
  // Refresh every 5 s while the box is ticked (remembered in this browser)
  // and nobody is typing in a form.
  var box = document.getElementById('auto-refresh');
  if (box) {
    box.checked = localStorage.getItem('baton-refresh') === '1';
    box.addEventListener('change', function () { localStorage.setItem('baton-refresh', box.checked ? '1' : '0'); });
    setInterval(function () {
      var a = document.activeElement;
      var typing = a && (a.tagName === 'INPUT' || a.tagName === 'TEXTAREA') && a !== box;
      if (box.checked && !typing) { location.reload(); }
    }, 5000);
  }
  // Actions: ask before the ones that cannot be undone; remember the token
  // for this tab only (sessionStorage), so it is typed once.
  var saved = sessionStorage.getItem('baton-token') || '';
  document.querySelectorAll('form.action').forEach(function (f) {
    var t = f.querySelector('input[name=token]');
    if (t && saved) { t.value = saved; }
    f.addEventListener('submit', function (ev) {
      var q = f.getAttribute('data-confirm');
      if (q && !window.confirm(q)) { ev.preventDefault(); return; }
      if (t) { sessionStorage.setItem('baton-token', t.value); }
    });
  });
})();
