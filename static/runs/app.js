// Progressive enhancement only; every page works without this file.
// A form that changes state is sent once: after the first submit its buttons are disabled, so
// a double click cannot send a second approval (the server would refuse it anyway).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || form.method.toLowerCase() !== "post") return;
  // After the browser has built the request: a disabled button is left out of the form data.
  setTimeout(() => {
    for (const button of form.querySelectorAll("button[type=submit]")) button.disabled = true;
  }, 0);
});

// Coming back through the browser's history must not leave the buttons dead.
window.addEventListener("pageshow", (event) => {
  if (!event.persisted) return;
  for (const button of document.querySelectorAll("form button[type=submit]")) button.disabled = false;
});

// The run page's decision bar stays at the top: anchored sections must land below it, so its
// real height (which depends on the width) goes into --decision-h for scroll-padding-top.
// On a phone only its state line stays (the bar itself is display: contents there).
function measureDecision() {
  const bar = document.getElementById("decision");
  if (!bar) return;
  const stuck = getComputedStyle(bar).display === "contents" ? bar.querySelector(".decision-state") : bar;
  document.documentElement.style.setProperty("--decision-h", `${stuck ? stuck.offsetHeight : 0}px`);
}
document.addEventListener("DOMContentLoaded", measureDecision);
window.addEventListener("resize", measureDecision);
document.addEventListener("htmx:afterSettle", measureDecision);

// A banner that is true only while the run is active ("run-7 is resuming…", tagged
// while-active by the view) leaves once the run page's decision says the run stopped or
// finished.
function dropStaleBanners() {
  const bar = document.getElementById("decision");
  if (!bar || bar.querySelector(".badge.status-pending, .badge.status-running, .badge.status-resuming")) return;
  for (const item of document.querySelectorAll(".messages .message-while-active")) item.remove();
  for (const list of document.querySelectorAll(".messages")) if (!list.children.length) list.remove();
}
document.addEventListener("DOMContentLoaded", dropStaleBanners);
document.addEventListener("htmx:afterSettle", dropStaleBanners);

// A page drawn as the answer to a POST that already acted (a group approved in the request)
// names its own address: the address bar takes it, so a reload reads that page instead of
// sending the approval again (which the server would refuse as a conflict).
document.addEventListener("DOMContentLoaded", () => {
  const own = document.querySelector("[data-canonical-url]");
  if (own) history.replaceState(null, "", own.dataset.canonicalUrl);
});
