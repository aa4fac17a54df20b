// The step-through viewer: draws a recorded trace (batchspec.trace, JSON lines
// format version 2) step by step. Vanilla JS, no network: the traces sit in the
// page as JSON, in the script element of class bsv-data.
//
// One shared timeline drives every pane, so two methods run on the same
// prompts (EQSPEC and masking) are compared at the same round and the same
// step of that round: the panes stay comparable even when one method makes
// more forward calls per round than the other.
(function () {
  "use strict";
  const d = window.bsvDraw;
  const el = d.el;

  function key(step) { return step.batch + ":" + step.round; }

  // The ordered (batch, round) keys of all traces together, and each trace's steps per key.
  function timeline(traces) {
    const keys = [];
    const seen = new Set();
    const byKey = traces.map(function (trace) {
      const groups = new Map();
      trace.steps.forEach(function (step) {
        const k = key(step);
        if (!groups.has(k)) groups.set(k, []);
        groups.get(k).push(step);
        if (!seen.has(k)) { seen.add(k); keys.push([step.batch, step.round, k]); }
      });
      return groups;
    });
    keys.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1]; });
    return { keys: keys.map(function (k) { return k[2]; }), byKey: byKey };
  }

  function drawPane(pane, trace, steps, j) {
    pane.body.replaceChildren();
    if (!steps) { pane.status.textContent = "this run has no such round (its batch finished)"; return; }
    const step = steps[Math.min(j, steps.length - 1)];
    const decision = d.decisionOf(steps);
    pane.root.dataset.step = step.step;
    pane.root.dataset.round = step.round;
    pane.root.dataset.violations = step.violations.map(function (v) { return v.invariant; }).join(" ");
    pane.status.textContent = "batch " + step.batch + ", round " + step.round + ", step " + step.step +
      " (" + (Math.min(j, steps.length - 1) + 1) + " of " + steps.length + ")" + (j >= steps.length ? ", done" : "");
    pane.body.appendChild(d.drawViolations(step));
    if (!step.observation) { pane.body.appendChild(el("p", "", "the batch is empty: every row has left")); }
    else {
      pane.body.appendChild(el("div", "bsv-caption", "batch grid (width L = " + step.observation.tokens[0].length + ")"));
      pane.body.appendChild(d.drawGrid(trace, step, decision));
      if (step.observation.calls.length) pane.body.appendChild(d.drawCalls(step));
      Object.keys(step.observation.caches).forEach(function (m) { pane.body.appendChild(d.drawCache(trace, step, m)); });
    }
    if (step.decision) {
      pane.body.appendChild(el("div", "bsv-caption", "what round " + step.decision.round + " decided"));
      pane.body.appendChild(d.drawDecision(step.decision));
    }
    pane.body.appendChild(d.drawOutputs(trace));
  }

  function Viewer(root, traces) {
    const line = timeline(traces);
    const state = { at: 0, j: 0 };
    const bar = root.querySelector(".bsv-controls");
    const where = root.querySelector(".bsv-where");
    const panes = traces.map(function (trace, t) {
      const node = el("section", "bsv-pane");
      node.appendChild(el("h3", "bsv-title", trace.label));
      const status = el("div", "bsv-status");
      const body = el("div", "bsv-body");
      node.append(status, body);
      root.querySelector(".bsv-panes").appendChild(node);
      return { root: node, status: status, body: body, trace: trace, groups: line.byKey[t] };
    });
    function longest() {
      return Math.max.apply(null, panes.map(function (p) { return (p.groups.get(line.keys[state.at]) || []).length; }));
    }
    function render() {
      where.textContent = "round " + line.keys[state.at].split(":")[1] + ", step " + (state.j + 1) + " of " + longest();
      root.dataset.round = line.keys[state.at].split(":")[1];
      root.dataset.j = state.j;
      panes.forEach(function (p) { drawPane(p, p.trace, p.groups.get(line.keys[state.at]), state.j); });
    }
    function move(delta) {
      if (delta > 0 && state.j + 1 < longest()) state.j += 1;
      else if (delta > 0 && state.at + 1 < line.keys.length) { state.at += 1; state.j = 0; }
      else if (delta < 0 && state.j > 0) state.j -= 1;
      else if (delta < 0 && state.at > 0) { state.at -= 1; state.j = longest() - 1; }
      render();
    }
    function jump(roundDelta) {
      state.at = Math.max(0, Math.min(line.keys.length - 1, state.at + roundDelta));
      state.j = 0;
      render();
    }
    // The next (round, step) after the current one where some pane records a violation.
    function nextViolation() {
      const start = { at: state.at, j: state.j };
      for (;;) {
        const before = state.at + ":" + state.j;
        move(1);
        if (before === state.at + ":" + state.j) break;  // the end of the timeline
        const found = panes.some(function (p) {
          const steps = p.groups.get(line.keys[state.at]);
          return steps && state.j < steps.length && steps[state.j].violations.length > 0;
        });
        if (found) return;
      }
      state.at = start.at;
      state.j = start.j;
      render();
      where.textContent += " (no violation after this step)";
    }
    const actions = { "prev-round": function () { jump(-1); }, prev: function () { move(-1); },
      next: function () { move(1); }, "next-round": function () { jump(1); }, "next-violation": nextViolation };
    bar.querySelectorAll("button").forEach(function (b) { b.addEventListener("click", actions[b.dataset.action]); });
    root.addEventListener("keydown", function (e) {
      if (e.key === "ArrowRight") { move(1); e.preventDefault(); }
      if (e.key === "ArrowLeft") { move(-1); e.preventDefault(); }
    });
    render();
  }

  // Each fragment carries this script; a viewer already started is left alone.
  document.querySelectorAll(".bsv-viewer:not([data-ready])").forEach(function (root) {
    root.dataset.ready = "1";
    new Viewer(root, JSON.parse(root.querySelector(".bsv-data").textContent));
  });
})();
