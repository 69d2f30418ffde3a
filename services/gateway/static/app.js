// The operator UI's only script: follows a running job's output live. It polls
// /ui/jobs/<id>/output?offset=N every 2 s, appends the new text with textContent (never as
// HTML), and at a terminal state reloads the page once, so the times, outcome, result and
// buttons are the ended job's (a terminal job's page does not follow, so it cannot loop).
"use strict";

(function () {
  var TERMINAL = ["completed", "failed", "refused", "lost", "withdrawn"];
  var POLL_MS = 2000;

  function follow(pre) {
    var jobId = pre.getAttribute("data-job");
    var offset = Number(pre.getAttribute("data-offset")) || 0;
    var stateLine = document.getElementById("job-state");
    var live = document.getElementById("job-live");
    var reload = document.getElementById("job-reload");
    if (!/^[0-9]+$/.test(jobId || "")) {
      return;
    }

    function say(text) {
      if (live) {
        live.textContent = text;
      }
    }

    function finish(state) {
      if (stateLine) {
        stateLine.textContent = state;
        stateLine.className = "state state-" + state.replace(/[^a-z]/g, "");
      }
      say("The job has ended; showing its result.");
      if (reload) {
        reload.hidden = false;
      }
      window.location.reload();
    }

    function poll() {
      var url = "/ui/jobs/" + jobId + "/output?offset=" + encodeURIComponent(String(offset));
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("status " + response.status);
          }
          return response.json();
        })
        .then(function (answer) {
          if (typeof answer.new_output === "string" && answer.new_output.length > 0) {
            pre.appendChild(document.createTextNode(answer.new_output));
            pre.scrollTop = pre.scrollHeight;
          }
          if (typeof answer.offset === "number" && answer.offset >= offset) {
            offset = answer.offset;
          }
          var state = typeof answer.state === "string" ? answer.state : "";
          if (stateLine && state && stateLine.textContent !== state) {
            stateLine.textContent = state;
          }
          if (TERMINAL.indexOf(state) >= 0) {
            finish(state);
            return;
          }
          window.setTimeout(poll, POLL_MS);
        })
        .catch(function () {
          say("Live output stopped (the plane did not answer); reload the page to try again.");
        });
    }

    window.setTimeout(poll, POLL_MS);
  }

  function start() {
    var pre = document.getElementById("job-output");
    if (pre && pre.getAttribute("data-live") === "yes") {
      follow(pre);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
