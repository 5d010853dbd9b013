// The course's additions to the book theme (site/conf.py: html_js_files).
//
// Copy buttons: every block of code gets a button that copies its text (without the prompt or
// the output) to the clipboard; a cell's printed output gets none.
//
// Printed tables: a table a cell prints (class "printed-table", site/conf.py) that is wider than
// its box scrolls inside it, and the sides past which it hides more of the table fade out
// (data-fade: "left", "right", both or none; course.css), so that a reader sees there is more.
//
// Click-to-zoom: a figure drawn narrower than its own width (the figures fit the text column of a
// 1280-pixel window; a narrower window shrinks them) gets the class "zoomable"; a click opens it
// at its full size over the page, and a click anywhere or Escape closes it. A figure's own width
// is its width attribute where it has one (a notebook's figure saved with twice the pixels, for
// high-DPI screens, carries its size in CSS pixels), else its width in pixels.
(function () {
  "use strict";

  function close() {
    const open = document.querySelector(".figure-zoom");
    if (open) open.remove();
  }

  function fullWidth(img) {
    return Number(img.getAttribute("width")) || img.naturalWidth;
  }

  function zoom(img) {
    close();
    const overlay = document.createElement("div");
    overlay.className = "figure-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", "figure at full size (click or Escape to close)");
    const big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    big.width = fullWidth(img);
    overlay.appendChild(big);
    overlay.addEventListener("click", close);
    document.body.appendChild(overlay);
  }

  function mark(img) {
    const shrunk = fullWidth(img) > img.clientWidth + 1;
    img.classList.toggle("zoomable", shrunk);
    img.title = shrunk ? "click to see the figure at full size" : "";
  }

  function setUp() {
    const images = document.querySelectorAll("article .cell_output img, article figure img");
    images.forEach(function (img) {
      if (img.complete) mark(img);
      else img.addEventListener("load", function () { mark(img); });
      img.addEventListener("click", function () {
        if (img.classList.contains("zoomable")) zoom(img);
      });
    });
    window.addEventListener("resize", function () { images.forEach(mark); });
    document.addEventListener("keydown", function (e) {
      if (e.key === "Escape") close();
    });
  }

  function addCopyButtons() {
    document.querySelectorAll("article div.highlight").forEach(function (block) {
      if (block.closest(".cell_output")) return;
      const pre = block.querySelector("pre");
      if (!pre || block.querySelector("button.copy-code")) return;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code";
      button.textContent = "copy";
      button.setAttribute("aria-label", "copy this code");
      button.addEventListener("click", function () {
        const text = pre.innerText.replace(/\n$/, "");
        const done = function () {
          button.textContent = "copied";
          setTimeout(function () { button.textContent = "copy"; }, 1500);
        };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done, function () { button.textContent = "copy failed"; });
        } else {  // a page opened from a file or over plain http: the selection way
          const area = document.createElement("textarea");
          area.value = text;
          document.body.appendChild(area);
          area.select();
          const ok = document.execCommand("copy");
          area.remove();
          if (ok) done(); else button.textContent = "copy failed";
        }
      });
      block.appendChild(button);
    });
  }

  function markEdges(pre) {
    const hidden = pre.scrollWidth - pre.clientWidth;
    const sides = [];
    if (hidden > 1 && pre.scrollLeft > 1) sides.push("left");
    if (hidden > 1 && pre.scrollLeft < hidden - 1) sides.push("right");
    pre.dataset.fade = sides.join(" ");
  }

  function fadePrintedTables() {
    const tables = document.querySelectorAll("article div.cell_output div.printed-table pre");
    tables.forEach(function (pre) {
      markEdges(pre);
      pre.addEventListener("scroll", function () { markEdges(pre); }, { passive: true });
    });
    window.addEventListener("resize", function () { tables.forEach(markEdges); });
  }

  function start() {
    setUp();
    addCopyButtons();
    fadePrintedTables();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
