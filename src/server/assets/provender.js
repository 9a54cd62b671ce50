// provender's pages work without scripts; this only adds the copy buttons.
"use strict";
(function () {
  function announce(button, text) {
    var status = document.querySelector(".copied");
    if (status) status.textContent = text;
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  }
  function copyByHand(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = document.execCommand("copy");
    document.body.removeChild(area);
    return ok;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent;
    var done = function () { announce(button, "Copied to the clipboard."); };
    var failed = function () {
      if (copyByHand(text)) done();
      else announce(button, "Could not copy: select the text and copy it.");
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, failed);
    } else {
      failed();
    }
  });
})();
