// Drawing for the step-through viewer (viewer.js): one step of a recorded trace
// (batchspec.trace) as DOM tables. Pure functions of the step; no state, no network.
// Defined once per page even when several viewer fragments carry it.
window.bsvDraw = window.bsvDraw || (function () {
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

  // The decision of a round (on its "realign" or "finish" step), to colour drafts on the verify step.
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
    if (step.step === "realign" && decision) {
      const row = decision.requests.indexOf(obs.requests[i]);
      const fresh = row < 0 ? 0 : decision.appended[row];
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
      [r, decision.accepted[i], decision.appended[i], decision.bonus[i], left ? "leaves" : decision.delta[i]]
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

  return { el: el, glyph: glyph, decisionOf: decisionOf, drawGrid: drawGrid, drawCalls: drawCalls,
    drawCache: drawCache, drawDecision: drawDecision, drawViolations: drawViolations, drawOutputs: drawOutputs };
})();
