// Dreamflow dashboard (hand-written, no library): loads the overview's slower parts (health, jobs) after the
// page, opens a fact's "where from?" under the fact (a second click closes it), and asks before a form marked
// data-confirm (forgetting a node) is sent.
"use strict";

async function loadPart(box, src) {
  box.classList.add("loading");
  try {
    const answer = await fetch(src, {headers: {"X-Dreamflow-Fragment": "1"}, credentials: "same-origin"});
    if (answer.redirected && answer.url.includes("/ui/login")) {
      window.location.reload();  // signed out meanwhile: the page itself goes to sign-in
      return;
    }
    const text = await answer.text();
    box.innerHTML = answer.ok ? text : '<p class="error">Could not load this part (HTTP ' + answer.status + ").</p>";
  } catch (error) {
    box.innerHTML = '<p class="error">Could not load this part: the service did not answer.</p>';
  } finally {
    box.classList.remove("loading");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const box of document.querySelectorAll(".fragment[data-src]")) {
    loadPart(box, box.dataset.src);
  }
  document.addEventListener("click", (event) => {
    const trace = event.target.closest("a[data-trace]");
    if (trace) {
      event.preventDefault();
      const holder = trace.closest(".fact") || trace.closest(".block");
      const open = holder.querySelector(":scope > .trace-box");
      trace.setAttribute("aria-expanded", open ? "false" : "true");
      if (open) {
        open.remove();
        return;
      }
      const box = document.createElement("div");
      box.className = "trace-box fragment";
      holder.appendChild(box);
      loadPart(box, trace.getAttribute("href"));
      return;
    }
    const link = event.target.closest("a[data-refresh]");
    const box = link && link.closest(".fragment");
    if (box) {
      event.preventDefault();
      loadPart(box, link.getAttribute("href"));
    }
  });
  document.addEventListener("submit", (event) => {
    const question = event.target.dataset ? event.target.dataset.confirm : null;
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });
});
