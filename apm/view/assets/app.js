// apm-view: renders window.APM_VIEW (data.js) — scores, filters, and one page of instances at a time,
// whose details come from chunks/<task>/<part>-<n>.js (an instance's own fields, each method's cells),
// loaded by <script> tags on demand for the rows and methods on screen (works from file://).
// No network, no framework; every text from the data is set with textContent, never parsed as HTML.
"use strict";
(function () {
  const D = window.APM_VIEW;
  const FILTERS = ["task", "family", "polarity", "outcome", "fault", "of", "differs", "key", "size"];
  const state = { task: "", family: "", polarity: "", outcome: "", fault: "", of: "", differs: "", key: "", size: "25",
    page: 0, hide: "" };  // hide: comma-separated config hashes whose column is not shown
  const $ = (id) => document.getElementById(id);
  const chunks = {};
  const loading = {};
  let renders = 0;
  window.APM_VIEW_CHUNK = (name, data) => { chunks[name] = data; };

  // Chunk `name` ({rows: {key: …}, texts: {digest: text}}): its script is added once; later calls share the promise.
  function loadChunk(name) {
    if (!loading[name]) {
      loading[name] = new Promise((resolve, reject) => {
        const tag = el("script", { src: `chunks/${name}.js` });
        tag.onload = () => resolve(chunks[name]);
        tag.onerror = () => reject(new Error(`chunks/${name}.js did not load`));
        document.head.append(tag);
      });
    }
    return loading[name];
  }

  // An element with attributes (or properties for on*/className) and children (strings become text).
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "className" || k.startsWith("on")) node[k] = v; else node.setAttribute(k, v);
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === "") continue;
      node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  }

  const num = (v, digits) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
  const methodById = Object.fromEntries(D.methods.map((m) => [m.id, m]));
  const methodIndex = Object.fromEntries(D.methods.map((m, i) => [m.id, i]));
  const OUTCOMES = { r: "right", w: "wrong" };
  // The fault filter's choices as marks of data.js's `faults` (site.py's FAULT_MARKS): e errored, p parse failed.
  const FAULTS = { errored: "e", parse_failed: "p", either: "ep" };
  // Where an instance's parts are (site.py's filter_entry): its own fields, and method i's cell (null: none).
  const ownChunk = (e) => `${e.task}/i-${e.chunk}`;
  const cellChunk = (e, i) => (e.cells[i] === null ? null : `${e.task}/m${i}-${e.cells[i]}`);

  // A score with its counts on hover; a click shows the instances behind it (showInstances).
  function scoreCell(m, column) {
    const score = m.scores[column.id];
    if (!score) return el("td", {}, "");
    const mark = score.n_error > 0 ? "†" : "";
    const title = `n=${score.n}, errors=${score.n_error}, unjudged=${score.n_unjudged} (click: show these instances)`;
    return el("td", { title, className: "score", "data-method": m.id, "data-column": column.id,
      "data-score": score.value === null ? "" : score.value, onclick: () => showInstances(m, column) },
    num(score.value, 2) + mark);
  }

  // The instances behind a score cell: every other filter cleared, the column's task or family and the method
  // set (its column shown), and the list scrolled into view.
  function showInstances(m, column) {
    for (const name of FILTERS) if (name !== "size") state[name] = "";
    Object.assign(state, column.filter, { of: m.id, page: 0 });
    state.hide = [...hidden()].filter((id) => id !== m.id).join(",");
    writeHash();
    showState();
    render();
    $("filters").scrollIntoView({ block: "start" });
  }

  const hidden = () => new Set(state.hide.split(",").filter(Boolean));

  // The checkbox of a method's row: whether its column is shown beside the others.
  function showBox(m) {
    return el("input", { type: "checkbox", "data-method": m.id, title: "show this method's column", onchange: () => {
      const off = hidden();
      if (off.has(m.id)) off.delete(m.id); else off.add(m.id);
      state.hide = [...off].join(",");
      writeHash();
      render();
    } });
  }

  function renderScores() {
    const cols = D.score_columns;
    const head = el("tr", {}, el("th", {}, "shown"), el("th", { className: "label" }, "Method"), el("th", {}, "config"),
      el("th", {}, "judge"), cols.map((c) => el("th", {}, c.label)));
    const rows = D.methods.map((m) => el("tr", { "data-method": m.id }, el("td", {}, showBox(m)),
      el("td", { className: "label", title: [...m.run_dirs, m.coverage.gap].filter(Boolean).join("\n") }, m.label,
        m.coverage.gap ? el("div", { className: "coverage-gap" }, m.coverage.gap) : ""),
      el("td", { className: "left mono" }, m.config_hash),
      el("td", { className: "left" }, m.judge || "none"), cols.map((c) => scoreCell(m, c))));
    $("score-table").replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  }

  function renderHeader() {
    const n = D.instances.length;
    $("summary").textContent = `${n} instances × ${D.methods.length} methods. Each method's "prompt sent" is the ` +
      "text its backbone received, kept beside the records and checked against the record's prompt_sha256; " +
      "\"Asked\" lists the release fields that fill the Appendix E templates.";
    const notes = [D.notes.thumbnails, ...D.notes.releases, ...D.notes.skipped_lines.map((s) => `skipped line ${s}`)];
    $("notes").replaceChildren(...notes.map((s) => el("li", {}, s)));
  }

  function fillSelect(id, values, label) {
    const select = $(id);
    for (const v of values) select.append(el("option", { value: v }, label ? label(v) : v));
  }

  function distinct(field) {
    return [...new Set(D.instances.map((i) => (i[field] === null ? "none" : i[field])))];
  }

  function setupFilters() {
    fillSelect("f-task", distinct("task"));
    fillSelect("f-family", distinct("family"));
    fillSelect("f-polarity", distinct("polarity"));
    fillSelect("f-of", D.methods.map((m) => m.id), (id) => methodById[id].label);
    for (const name of FILTERS) {
      const input = $("f-" + name);
      const read = () => {
        state[name] = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value;
        state.page = 0;
        writeHash();
        render();
      };
      input.addEventListener(input.type === "search" ? "input" : "change", read);
    }
    $("prev").onclick = () => { state.page -= 1; writeHash(); render(); };
    $("next").onclick = () => { state.page += 1; writeHash(); render(); };
    window.addEventListener("hashchange", () => { readHash(); render(); });
    $("frame-view").addEventListener("click", () => $("frame-view").close());
  }

  // The filters live in the URL's #fragment, so a filtered view can be bookmarked or shared.
  function writeHash() {
    const params = new URLSearchParams();
    for (const name of [...FILTERS, "hide"]) {
      if (state[name] && !(name === "size" && state.size === "25")) params.set(name, state[name]);
    }
    if (state.page) params.set("page", String(state.page + 1));
    history.replaceState(null, "", "#" + params.toString());
  }

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    for (const name of [...FILTERS, "hide"]) state[name] = params.get(name) || (name === "size" ? "25" : "");
    state.page = Math.max(0, Number(params.get("page") || 1) - 1);
    showState();
  }

  // The inputs as the state says: each filter's value, each method's checkbox.
  function showState() {
    const off = hidden();
    for (const box of document.querySelectorAll("#score-table input[data-method]")) box.checked = !off.has(box.dataset.method);
    for (const name of FILTERS) {
      const input = $("f-" + name);
      if (input.type === "checkbox") input.checked = state[name] === "1"; else input.value = state[name];
    }
  }

  function matches(inst) {
    if (state.task && inst.task !== state.task) return false;
    if (state.family && inst.family !== state.family) return false;
    if (state.polarity && (inst.polarity === null ? "none" : inst.polarity) !== state.polarity) return false;
    if (state.differs && !inst.differs) return false;
    if (state.key && !inst.key.includes(state.key)) return false;
    if (state.of && inst.outcomes[methodIndex[state.of]] === "-") return false;
    if (state.fault) {
      const marks = state.of ? [inst.faults[methodIndex[state.of]]] : [...inst.faults];
      if (!marks.some((c) => FAULTS[state.fault].includes(c))) return false;
    }
    if (state.outcome) {
      const marks = state.of ? [inst.outcomes[methodIndex[state.of]]] : [...inst.outcomes];
      const outcomes = marks.filter((c) => c !== "-").map((c) => OUTCOMES[c]);
      if (!outcomes.length || !outcomes.every((o) => o === state.outcome)) return false;
    }
    return true;
  }

  function renderPrompt(inst) {
    if (!inst.prompt) return el("p", { className: "note" }, "Prompt fields unavailable: the release was not readable.");
    const part = (p) => el("li", {}, el("span", { className: "time" }, p.time), el("strong", {}, p.label), " ",
      p.text, p.options.length ? el("ol", { className: "options" },
        p.options.map((o) => el("li", { className: o.correct ? "correct" : "", title: o.correct ? "correct" : null },
          o.text))) : null);
    return el("div", { className: "prompt" }, el("h3", {}, "Asked (release fields of the templates)"),
      el("ol", {}, inst.prompt.map(part)));
  }

  function verdict(inst, v) {
    const fault = v.fault ? ` · ${v.fault.replace("_", " ")}` : "";
    if (inst.family === "adaptive") {
      const option = v.answer ? ` (option ${v.answer})` : "";
      return `decision ${v.decision || "none"}${option} · gate ${v.gate_pass ? "pass" : "fail"}${fault}`;
    }
    return `answer ${v.answer || "none"} (correct ${inst.correct_option || "?"}) · ${v.outcome}${fault}`;
  }

  function frame(f) {
    const caption = `#${f.i + 1} · ${f.session} +${f.offset} s · ${f.wall_clock}`;
    const body = f.src ? el("img", { src: f.src, alt: caption, loading: "lazy", decoding: "async",
      title: "click to enlarge", onclick: () => enlarge(f.src, caption) })
      : el("div", { className: "missing" }, f.problem || "no thumbnail");
    return el("figure", {}, body, el("figcaption", {}, caption));
  }

  // A thumbnail enlarged in a modal dialog with its caption; Escape or a click closes it.
  function enlarge(src, caption) {
    const image = $("frame-view-image");
    image.src = src;
    image.alt = caption;
    $("frame-view-caption").textContent = caption;
    $("frame-view").showModal();
  }

  // Every frame sent as [session, offset], decoded from the cell's strip (site.py's collect.strip): runs of
  // one session's samples as a bitmap from their first sample, or the frames as they are.
  function stripFrames(strip) {
    if (strip.frames) return strip.frames;
    const [num, den] = strip.rate.split("/").map(Number);
    const rate = num / (den || 1);
    const out = [];
    for (const [session, first, bits] of strip.runs) {
      const bytes = atob(bits);
      for (let j = 0; j < bytes.length * 8; j++) {
        if (bytes.charCodeAt(j >> 3) & (0x80 >> (j & 7))) out.push([session, (first + j) / rate]);
      }
    }
    return out;
  }

  // Every frame the record was sent, built only when opened: captions, with the cell's thumbnails in place.
  function fullStrip(v, count) {
    const box = el("details", { className: "strip" }, el("summary", {}, `all ${count} frames`));
    box.addEventListener("toggle", () => {
      if (!box.open || box.dataset.built) return;
      box.dataset.built = "1";
      const thumbs = Object.fromEntries(v.frames.map((f) => [f.i, f]));
      box.append(el("ol", { className: "strip-list" }, stripFrames(v.strip).map(([session, offset], i) => thumbs[i]
        ? el("li", { className: "thumbed" }, frame(thumbs[i])) : el("li", {}, `#${i + 1} · ${session} +${offset} s`))));
    });
    return box;
  }

  // The prompt the backbone was sent: each message's texts as they were, its frames as a count.
  function sentPrompt(v, texts) {
    const sent = v.sent || {};
    if (!sent.messages) return el("p", { className: "note sent-problem" }, `prompt sent: ${sent.problem || "not kept"}`);
    const part = (ref) => typeof ref === "string" ? el("pre", { className: "sent-text" }, texts[ref] ?? "")
      : el("div", { className: "sent-frames" }, ref.frames ? `[${ref.frames} video frames]` : `[${ref.stills} stills]`);
    return el("details", { className: "sent" }, el("summary", {}, "prompt sent"),
      sent.messages.map(([role, parts]) => el("div", { className: "sent-message" }, el("h4", {}, role), parts.map(part))));
  }

  function judgement(inst, v) {
    const j = v.judgement;
    if (!j) return v.gate_pass ? "not judged yet (run apm-judge)" : "gate failed: not judged (g = 0)";
    if (j.status !== "ok") return `${j.judge}: failed (${j.failure || j.error || "?"})`;
    const issues = (j.critical_issues || []).length ? ` Critical issues: ${j.critical_issues.join("; ")}` : "";
    return [el("strong", {}, `${j.score}/5`), ` by ${j.judge}. ${j.justification || ""}${issues}`];
  }

  function dl(pairs) {
    return el("dl", {}, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function methodView(inst, m) {
    const v = inst.by[m.id];
    const head = el("h3", { title: m.config_hash }, m.label);
    if (!v) return el("section", { className: "method absent", "data-method": m.id }, head, el("p", {}, "no record"));
    const sent = v.strip.count;
    const parse = v.parse_status ? v.parse_status + (v.parse_error ? ` (${v.parse_error})` : "") : null;
    const tokens = v.tokens && (v.tokens.prompt !== null || v.tokens.completion !== null)
      ? `${v.tokens.prompt ?? "?"} prompt, ${v.tokens.completion ?? "?"} completion` : null;
    return el("section", {
      className: `method ${v.outcome}`, "data-method": m.id, "data-outcome": v.outcome, "data-fault": v.fault || "",
      "data-answer": v.answer || "", "data-decision": v.decision || "",
    }, head,
    el("div", { className: "verdict" }, verdict(inst, v)),
    el("div", { className: "frames", "data-count": sent }, v.frames.map(frame)),
    sent > v.frames.length ? fullStrip(v, sent) : null,
    sentPrompt(v, inst.texts),
    dl([
      ["frames", sent > v.frames.length ? `${sent} sent, ${v.frames.length} shown` : `${sent} sent`],
      ["output", el("pre", { className: "output" }, v.output ?? "")],
      ["parse", parse],
      ["judge", inst.family === "adaptive" ? el("span", { className: "judgement" }, judgement(inst, v)) : null],
      ["error", v.error],
      ["latency", v.ttft_s === null ? null : `TTFT ${num(v.ttft_s, 3)} s · total ${num(v.total_s, 3)} s`],
      ["tokens", tokens],
      ["memory", v.memory_bytes === null ? null : `${v.memory_bytes} B`],
      ["truncation", v.truncation ? JSON.stringify(v.truncation) : null],
      ["prompt", el("span", { className: "mono", title: v.prompt_sha256 || "" },
        `${(v.prompt_sha256 || "").slice(0, 12)} · ${v.prompt_version || ""}`)],
    ]));
  }

  function instanceView(inst) {
    const badges = [inst.task, inst.family, inst.polarity, `probe ${inst.probe_time}`,
      inst.window_start ? `window from ${inst.window_start}` : null, `session ${inst.session}`]
      .filter(Boolean).map((b) => el("span", { className: "badge" }, b));
    if (inst.differs) badges.push(el("span", { className: "badge differs" }, "differs"));
    const off = hidden();
    const shownMethods = D.methods.filter((m) => !off.has(m.id));
    const grid = el("div", { className: "methods" }, shownMethods.map((m) => methodView(inst, m)));
    grid.style.gridTemplateColumns = `repeat(${shownMethods.length}, minmax(240px, 1fr))`;
    return el("article", { className: "instance", "data-key": inst.key, "data-task": inst.task },
      el("div", { className: "head" }, el("h2", {}, inst.key), badges),
      renderPrompt(inst),
      inst.annotation ? el("details", {}, el("summary", {}, "annotation"),
        el("pre", {}, JSON.stringify(inst.annotation, null, 1))) : null,
      grid);
  }

  // One instance whole from its loaded chunks: its own fields and the prompt texts its methods were sent
  // (by digest, in its own chunk), and each shown method's cell.
  function assemble(e, off) {
    const by = {};
    for (const [i, m] of D.methods.entries()) {
      const name = cellChunk(e, i);
      if (!name || off.has(m.id)) continue;
      by[m.id] = chunks[name].rows[e.key];
    }
    const own = chunks[ownChunk(e)];
    return { ...own.rows[e.key], differs: e.differs, by, texts: own.texts };
  }

  function render() {
    const shown = D.instances.filter(matches);
    const size = Number(state.size) || 25;
    const pages = Math.max(1, Math.ceil(shown.length / size));
    state.page = Math.min(Math.max(0, state.page), pages - 1);
    const start = state.page * size;
    const page = shown.slice(start, start + size);
    const off = hidden();
    const wanted = page.flatMap((e) => [ownChunk(e),
      ...D.methods.map((m, i) => (off.has(m.id) ? null : cellChunk(e, i))).filter(Boolean)]);
    $("count").textContent = shown.length
      ? `${start + 1}–${start + page.length} of ${shown.length} (page ${state.page + 1} of ${pages})`
      : `0 of ${D.instances.length} match`;
    $("count").dataset.matching = String(shown.length);
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
    const mine = ++renders;
    document.body.dataset.busy = "1";
    const show = (nodes) => {
      if (mine !== renders) return;  // a newer render has started: it will show its own rows
      $("rows").replaceChildren(...nodes);
      document.body.dataset.busy = "0";
      document.body.dataset.shownMs ||= String(Math.round(performance.now()));  // the first page: ms since navigation
    };
    Promise.all([...new Set(wanted)].map(loadChunk))
      .then(() => show(page.map((e) => instanceView(assemble(e, off)))))
      .catch((err) => show([el("p", { className: "note" }, String(err))]));
  }

  renderHeader();
  renderScores();
  setupFilters();
  readHash();
  render();
})();
