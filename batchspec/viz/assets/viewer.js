// The step-through viewer: draws a recorded trace (batchspec.trace, JSON lines
// format version 1) step by step. Vanilla JS, no network: the traces sit in the
// page as JSON, in the script element of class bsv-data.
//
// One shared timeline drives every pane, so two methods run on the same
// prompts (EQSPEC and masking) are compared at the same round and the same
// step of that round: the panes stay comparable even when one method makes
// more forward calls per round than the other.
(function () {
  "use strict";

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Bytes as characters for the default pair (token i is byte i), ids otherwise.
  function glyph(alphabet, id) {
    if (id === null || id === undefined) return "?";
    if (alphabet !== "bytes") return String(id);
    if (id === 10) return "\u21b5";
    if (id === 32) return "\u2423";
    if (id > 32 && id < 127) return String.fromCharCode(id);
    return id.toString(16).padStart(2, "0");
  }

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

  // The decision of a round (on its "align" or "finish" step), to colour drafts on the verify step.
  function decisionOf(steps) {
    for (const step of steps) if (step.decision) return step.decision;
    return null;
  }

  function rowRole(trace, obs, i, c, decision, step) {
    const pad = obs.pad[i];
    if (c < pad) return "pad";
    if (obs.mask[i][c] === 0) return "hole";
    const t = c - pad;
    const promptLength = trace.header.prompts[obs.requests[i]].length;
    if (t < promptLength) return "prompt";
    if (step.step === "align" && decision) {
      const row = decision.requests.indexOf(obs.requests[i]);
      const fresh = row < 0 ? 0 : decision.committed[row];
      const first = obs.length[i] - fresh;
      if (t >= first) {
        const m = decision.accepted[row];
        if (t - first < m) return "accepted";
        return decision.bonus[row] === null ? "committed" : "bonus";
      }
    }
    return "committed";
  }

  function header(width, label) {
    const tr = el("tr");
    tr.appendChild(el("th", "bsv-label", label));
    for (let c = 0; c < width; c++) tr.appendChild(el("th", "bsv-slot", c % 5 === 0 ? String(c) : ""));
    return tr;
  }

  function violatedRows(step, names) {
    const rows = new Set();
    step.violations.forEach(function (v) { if (names.indexOf(v.invariant) >= 0 && v.row !== null) rows.add(v.row); });
    return rows;
  }

  // The batch grid: pad / prompt / committed / drafted / accepted / rejected / bonus, rows labelled p_i, c_i.
  function drawGrid(trace, step, decision) {
    const obs = step.observation;
    const alphabet = trace.header.alphabet;
    const drafts = obs.draft_tokens || [];
    const extra = drafts.length ? Math.max.apply(null, drafts.map(function (d) { return d.length; })) + 1 : 0;
    const width = obs.tokens[0].length;
    const table = el("table", "bsv-grid");
    table.appendChild(header(width + extra, "row  p_i  c_i"));
    const bad = violatedRows(step, ["I1"]);
    obs.tokens.forEach(function (tokens, i) {
      const tr = el("tr", bad.has(i) ? "bsv-bad-row" : "");
      tr.appendChild(el("th", "bsv-label", "r" + obs.requests[i] + "  " + obs.pad[i] + "  " + obs.length[i]));
      tokens.forEach(function (id, c) {
        const role = rowRole(trace, obs, i, c, decision, step);
        const td = el("td", "bsv-cell bsv-" + role, role === "pad" ? "" : glyph(alphabet, id));
        td.title = "slot " + c + ": " + role + (role === "pad" ? "" : ", token " + id);
        tr.appendChild(td);
      });
      const row = decision ? decision.requests.indexOf(obs.requests[i]) : -1;
      (drafts[i] || []).forEach(function (id, j) {
        let role = "drafted";
        if (step.step === "verify" && row >= 0) role = j < decision.accepted[row] ? "accepted" : "rejected";
        tr.appendChild(el("td", "bsv-cell bsv-" + role, glyph(alphabet, id)));
      });
      if (step.step === "verify" && obs.committed && row >= 0) {
        const bonus = obs.committed[i][decision.accepted[row]];
        if (bonus !== undefined) tr.appendChild(el("td", "bsv-cell bsv-bonus", glyph(alphabet, bonus)));
      }
      table.appendChild(tr);
    });
    return table;
  }

  // The position ids each forward call was given, at the cache slots they fill;
  // a position that is not cumsum(mask) - 1 of its own call's mask (Spec §3.2) is marked.
  function drawCalls(step) {
    const box = el("div", "bsv-calls");
    step.observation.calls.forEach(function (call) {
      const n = call.input_ids[0].length;
      const T = call.cache_length;
      box.appendChild(el("div", "bsv-caption", call.model + " forward: " + n + " input(s) at slots " + T + "\u2013" + (T + n - 1)));
      const table = el("table", "bsv-grid bsv-positions");
      const tr0 = el("tr");
      tr0.appendChild(el("th", "bsv-label", "slot"));
      for (let j = 0; j < n; j++) tr0.appendChild(el("th", "bsv-slot", String(T + j)));
      table.appendChild(tr0);
      call.position_ids.forEach(function (positions, i) {
        const tr = el("tr");
        tr.appendChild(el("th", "bsv-label", "row " + i));
        let count = 0;
        for (let s = 0; s < T; s++) count += call.attention_mask[i][s];
        positions.forEach(function (p, j) {
          const attended = call.attention_mask[i][T + j] !== 0;
          if (attended) count += 1;
          const wrong = attended && p !== count - 1;
          const td = el("td", "bsv-cell " + (attended ? (wrong ? "bsv-wrong" : "bsv-position") : "bsv-pad"), String(p));
          td.title = attended ? "position " + p + (wrong ? ", expected cumsum(mask) - 1 = " + (count - 1) : "") : "masked input";
          tr.appendChild(td);
        });
        table.appendChild(tr);
      });
      box.appendChild(table);
    });
    return box;
  }

  // Cache provenance: which committed token each slot holds and where its key came
  // from; a slot moved by the realignment shows its shift (s - s', δ_i after repad).
  function drawCache(trace, step, model) {
    const cache = step.observation.caches[model];
    const box = el("div", "bsv-cache");
    box.appendChild(el("div", "bsv-caption", model + " cache: " + cache.length + " slots"));
    if (!cache.length) return box;
    const table = el("table", "bsv-grid");
    table.appendChild(header(cache.length, "row"));
    const bad = violatedRows(step, ["I3", "I4"]);
    cache.token.forEach(function (tokens, i) {
      const tr = el("tr", bad.has(i) ? "bsv-bad-row" : "");
      const request = step.observation.requests[i];
      const at = step.decision ? step.decision.requests.indexOf(request) : -1;
      const delta = at >= 0 ? step.decision.delta[at] : null;
      tr.appendChild(el("th", "bsv-label", "r" + request + (delta ? "  \u03b4 " + (delta > 0 ? "+" : "") + delta : "")));
      tokens.forEach(function (id, s) {
        const source = cache.source[i][s];
        let role = "kept";
        let note = "";
        if (source === null) role = "written";
        else if (source[0] !== step.observation.requests[i]) { role = "foreign"; note = " from request " + source[0]; }
        else if (source[1] !== s) { role = "moved"; note = " shifted by " + (s - source[1]); }
        if (id === null) role = "unknown";
        if (s < step.observation.pad[i]) role = "pad";  // a padding slot: whatever it holds is masked
        const td = el("td", "bsv-cell bsv-" + role, role === "pad" ? "" : glyph(trace.header.alphabet, id));
        td.title = "slot " + s + ": token " + id + ", position " + cache.position[i][s] + note;
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    box.appendChild(table);
    return box;
  }

  function drawDecision(decision) {
    const table = el("table", "bsv-decision");
    const names = ["request", "m_i accepted", "a_i committed", "bonus", "\u03b4_i"];
    const tr0 = el("tr");
    names.forEach(function (n) { tr0.appendChild(el("th", "", n)); });
    table.appendChild(tr0);
    decision.requests.forEach(function (r, i) {
      const tr = el("tr");
      const left = decision.leaving.indexOf(r) >= 0;
      [r, decision.accepted[i], decision.committed[i], decision.bonus[i], left ? "leaves" : decision.delta[i]]
        .forEach(function (v) { tr.appendChild(el("td", "", v === null ? "\u2013" : String(v))); });
      table.appendChild(tr);
    });
    return table;
  }

  function drawViolations(step) {
    const box = el("div", step.violations.length ? "bsv-violations bsv-has" : "bsv-violations");
    if (!step.violations.length) { box.textContent = "every invariant holds after this step"; return box; }
    step.violations.forEach(function (v) {
      const line = el("div", "bsv-violation");
      line.dataset.invariant = v.invariant;
      line.textContent = v.invariant + " " + v.name + ": round " + v.round + ", " + v.step + ", row " + v.row +
        (v.model ? " (" + v.model + ")" : "") + ": expected " + JSON.stringify(v.expected) +
        ", actual " + JSON.stringify(v.actual) + (v.detail ? ": " + v.detail : "");
      box.appendChild(line);
    });
    return box;
  }

  // The run's final text per request, prompt then continuation: where masking drifts.
  function drawOutputs(trace) {
    const box = el("div", "bsv-outputs");
    if (!trace.result) return box;
    box.appendChild(el("div", "bsv-caption", "final outputs (prompt | continuation)"));
    trace.result.sequences.forEach(function (sequence, r) {
      const line = el("div", "bsv-output");
      const text = function (ids) { return ids.map(function (id) { return glyph(trace.header.alphabet, id); }).join(""); };
      line.append(el("span", "bsv-output-prompt", "r" + r + " " + text(trace.header.prompts[r])),
        el("span", "bsv-output-new", text(sequence)));
      box.appendChild(line);
    });
    return box;
  }

  function drawPane(pane, trace, steps, j) {
    pane.body.replaceChildren();
    if (!steps) { pane.status.textContent = "this run has no such round (its batch finished)"; return; }
    const step = steps[Math.min(j, steps.length - 1)];
    const decision = decisionOf(steps);
    pane.root.dataset.step = step.step;
    pane.root.dataset.round = step.round;
    pane.root.dataset.violations = step.violations.map(function (v) { return v.invariant; }).join(" ");
    pane.status.textContent = "batch " + step.batch + ", round " + step.round + ", step " + step.step +
      " (" + (Math.min(j, steps.length - 1) + 1) + " of " + steps.length + ")" + (j >= steps.length ? ", done" : "");
    pane.body.appendChild(drawViolations(step));
    if (!step.observation) { pane.body.appendChild(el("p", "", "the batch is empty: every row has left")); }
    else {
      pane.body.appendChild(el("div", "bsv-caption", "batch grid (width L = " + step.observation.tokens[0].length + ")"));
      pane.body.appendChild(drawGrid(trace, step, decision));
      if (step.observation.calls.length) pane.body.appendChild(drawCalls(step));
      Object.keys(step.observation.caches).forEach(function (m) { pane.body.appendChild(drawCache(trace, step, m)); });
    }
    if (step.decision) {
      pane.body.appendChild(el("div", "bsv-caption", "what round " + step.decision.round + " decided"));
      pane.body.appendChild(drawDecision(step.decision));
    }
    pane.body.appendChild(drawOutputs(trace));
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
