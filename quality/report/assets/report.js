(function () {
  var box = document.getElementById("filter");
  if (!box) return;
  var q = document.getElementById("filter-q"), fails = document.getElementById("filter-fails");
  var count = document.getElementById("filter-count");
  var sections = document.querySelectorAll("section.tsec"), items = document.querySelectorAll("ul.toc li");
  function apply() {
    var text = q.value.trim().toLowerCase(), only = fails.checked, shown = 0;
    sections.forEach(function (s) {
      var hit = s.dataset.table.toLowerCase().indexOf(text) >= 0 && (!only || s.dataset.status === "fail");
      s.hidden = !hit;
      if (hit) { shown += 1; if (text) s.querySelector("details").open = true; }
    });
    items.forEach(function (li) {
      li.hidden = !(li.dataset.table.toLowerCase().indexOf(text) >= 0 && (!only || li.dataset.status === "fail"));
    });
    count.textContent = shown + " of " + sections.length + " tables shown";
    document.body.dataset.filtered = (text || only) ? "yes" : "no";
  }
  function fromHash() {
    var hash = location.hash.slice(1);
    if (hash.indexOf("=") >= 0) {
      var params = new URLSearchParams(hash);
      if (params.has("q")) q.value = params.get("q");
      fails.checked = params.get("filter") === "failures";
    } else if (hash) {
      var target = document.getElementById(hash);
      var inner = target && target.querySelector("details");
      if (inner) inner.open = true;
    }
    apply();
  }
  q.addEventListener("input", apply);
  fails.addEventListener("change", apply);
  window.addEventListener("hashchange", fromHash);
  box.hidden = false;
  fromHash();
})();
