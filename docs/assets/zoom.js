// A picture that the content column shows smaller than it was drawn gets a zoom
// (reading.css): click it for its full size, scrolling sideways when it is wider
// than the column; click again to fit it back. Pictures shown at full size, and the
// step-through viewer, are left alone.
(function () {
  function zoomable(img) {
    if (img.closest(".bs-zoom, .bsv-viewer") || !img.naturalWidth) return;
    if (img.getBoundingClientRect().width >= img.naturalWidth - 1) return;
    const box = document.createElement("span");
    box.className = "bs-zoom";
    box.title = "click for full size";
    img.replaceWith(box);
    box.appendChild(img);
    box.addEventListener("click", function () { box.classList.toggle("bs-zoom--full"); });
  }

  function scan() {
    document.querySelectorAll(".md-content img").forEach(function (img) {
      if (img.complete) zoomable(img);
      else img.addEventListener("load", function () { zoomable(img); }, { once: true });
    });
  }

  if (window.document$) window.document$.subscribe(scan);  // Material's page-load signal
  else document.addEventListener("DOMContentLoaded", scan);
})();
