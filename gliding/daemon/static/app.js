// The Gliding dashboard: the daemon's /v1 JSON API and event streams, drawn with the DOM.
// Everything a job produced (tool output, fetched pages, model replies) is attacker-controlled:
// it goes into the page as text (textContent, createTextNode, SVG <title> text), never as
// markup. The CSRF token comes from the page's <meta> and goes with every POST.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";  // a namespace name, not a request
  const CSRF_HEADER = "X-Gliding-CSRF";
  const MAX_EVENTS = 500;  // the newest events the list keeps (a chatty job stays readable)
  const TERMINAL = new Set(["job.finished", "job.cancelled", "job.stopped", "job.paused"]);
  const ENDED = new Set(["finished", "cancelled", "interrupted", "paused"]);
  const csrf = meta("gliding-csrf");
  const eventNames = meta("gliding-events").split(" ").filter(Boolean);
  const statuses = new Map();  // job -> its last status (a finished job's is kept)
  let current = null;  // the job shown: {job, stream, lastSeq, calls, roles}
  let jobsShown = "";  // what the job list shows, to redraw it only when that changes

  function meta(name) {
    const found = document.querySelector(`meta[name="${name}"]`);
    return found ? found.getAttribute("content") : "";
  }

  function $(id) { return document.getElementById(id); }

  // controls, and characters that reorder or hide text (bidi overrides, zero-width), shown as
  // \uXXXX: a call waiting for approval must read as the bytes that will run
  const HIDING = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;
  function visible(text) {
    return String(text).replace(HIDING, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  async function api(path, method = "GET", body = undefined) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers[CSRF_HEADER] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, credentials: "same-origin", cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {  // the session ended (a daemon restart): log in again
      window.location.assign("/");
      throw new Error("logged out");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      throw new Error((data.error && data.error.message) || `${response.status} ${response.statusText}`);
    }
    return data;
  }

  function jobPath(job) { return `/v1/jobs/${encodeURIComponent(job)}`; }

  function fmtInt(n) { return typeof n === "number" ? n.toLocaleString("en-US") : "–"; }

  function fmtTime(t) { return t ? new Date(t * 1000).toLocaleTimeString() : "–"; }

  function cost(progress) {
    if (!progress) return "–";
    const t = progress.tokens;
    if (t.cost_free) return `free (${t.cost_free})`;
    if (t.cost_usd === null || t.cost_usd === undefined) {
      return `unknown (at least $${(t.cost_usd_at_least || 0).toFixed(4)})`;
    }
    return `$${t.cost_usd.toFixed(4)}`;
  }

  function tokens(progress) {
    if (!progress) return "–";
    return `${fmtInt(progress.tokens.prompt)} / ${fmtInt(progress.tokens.completion)}`;
  }

  function stateBadge(record) {
    const shown = record.outcome || record.state;
    return el("span", `state ${shown}`, record.outcome ? `${record.state}: ${record.outcome}` : record.state);
  }

  // -- the job list ---------------------------------------------------------------------------

  async function refreshJobs() {
    let listed;
    try {
      listed = await api("/v1/jobs?limit=50");
    } catch (err) {
      $("connection").textContent = `cannot reach the daemon: ${err.message}`;
      return;
    }
    $("connection").textContent = `${listed.total} job${listed.total === 1 ? "" : "s"}`;
    await Promise.all(listed.jobs.map(async (job) => {
      const known = statuses.get(job.job);
      if (known && ENDED.has(known.state) && known.state === job.state) return;
      try {
        statuses.set(job.job, await api(jobPath(job.job)));
      } catch (err) {
        statuses.set(job.job, { ...job, progress: null });
      }
    }));
    const shown = listed.jobs.map((job) => statuses.get(job.job) || job);
    const signature = JSON.stringify([current && current.job, shown]);
    if (signature === jobsShown) return;  // unchanged: the rows stay as they are
    jobsShown = signature;
    const body = $("jobs").tBodies[0];
    clear(body);
    for (const job of listed.jobs) {
      const status = statuses.get(job.job) || job;
      const row = el("tr", "job");
      row.dataset.job = job.job;
      if (current && current.job === job.job) row.classList.add("selected");
      const goal = el("td", "goal");
      goal.append(el("div", "goal-text", job.goal || job.name), el("div", "id", job.job));
      row.append(goal);
      const state = el("td");
      state.append(stateBadge(status));
      row.append(state, el("td", "tokens", tokens(status.progress)), el("td", "cost", cost(status.progress)));
      row.title = job.goal;
      row.addEventListener("click", () => { window.location.hash = `#job=${encodeURIComponent(job.job)}`; });
      body.append(row);
    }
    $("jobs-empty").hidden = listed.jobs.length > 0;
  }

  // -- one job --------------------------------------------------------------------------------

  function openJob(job) {
    if (current && current.stream) current.stream.close();
    current = { job, stream: null, lastSeq: 0, calls: [], roles: new Map(), approvals: "" };
    $("job-panel").hidden = false;
    $("job-title").textContent = `Job ${job}`;
    for (const id of ["events", "pipeline", "board", "board-properties", "iri-content", "iri-meta"]) clear($(id));
    $("checks").replaceChildren(el("p", "muted", "No check report yet."));
    $("tokens").replaceChildren(el("p", "muted", "No model call yet."));
    $("tokens-total").textContent = "";
    $("events-count").textContent = "";
    $("iri").value = `gliding://job/${job}`;
    $("board-node").value = "";
    for (const row of document.querySelectorAll("tr.job")) row.classList.toggle("selected", row.dataset.job === job);
    refreshStatus();
    refreshApprovals();
    loadBoard();
    follow(0);
  }

  function follow(after) {
    const shown = current;
    const stream = new EventSource(`${jobPath(shown.job)}/events?after=${after}`);
    shown.stream = stream;
    const take = (message) => {
      if (current !== shown) return;
      let record;
      try { record = JSON.parse(message.data); } catch (err) { return; }
      if (record.event === "dropped" || record.event === "stream.dropped") {
        stream.close();  // fell behind: read on from the last event we have
        follow(shown.lastSeq);
        return;
      }
      onEvent(record);
      if (TERMINAL.has(record.event)) {
        stream.close();
        settle(shown, 20);
        refreshApprovals();
        loadBoard();
      }
    };
    for (const name of eventNames) stream.addEventListener(name, take);
    stream.onmessage = take;
    stream.onerror = () => {
      if (stream.readyState === EventSource.CLOSED) $("connection").textContent = "event stream closed";
    };
  }

  // The queue's state follows a job's last event a moment later (its artifacts are archived
  // in between): ask again until it says the job ended.
  async function settle(shown, tries) {
    const status = await refreshStatus();
    if (current !== shown) return;
    if ((!status || !ENDED.has(status.state)) && tries > 0) {
      window.setTimeout(() => settle(shown, tries - 1), 500);
    } else {
      refreshJobs();
    }
  }

  async function refreshStatus() {
    const shown = current;
    let status;
    try {
      status = await api(jobPath(shown.job));
    } catch (err) {
      showError(err.message);
      return null;
    }
    if (current !== shown) return null;
    statuses.set(shown.job, status);
    $("job-goal").textContent = status.goal;
    const facts = $("job-summary");
    clear(facts);
    const p = status.progress;
    const rows = [
      ["State", status.outcome ? `${status.state}: ${status.outcome}` : status.state],
      ["Model", status.model || "(the task's)"],
      ["Turns", p ? `${p.turns} (${Object.entries(p.turns_by_role).map(([r, n]) => `${r} ${n}`).join(", ")})` : "–"],
      ["Tokens", tokens(p)], ["Cost", cost(p)],
      ["Submitted", fmtTime(status.submitted)], ["Finished", fmtTime(status.finished)],
      ["Workspace", status.workspace],
    ];
    if (status.error) rows.push(["Error", status.error]);
    for (const [key, value] of rows) facts.append(el("dt", "", key), el("dd", "", value));
    return status;
  }

  function onEvent(record) {
    current.lastSeq = Math.max(current.lastSeq, record.seq || 0);
    const data = record.data || {};
    if (record.event === "model.delta") return;  // streamed text: the turn's line follows
    const item = el("li");
    item.dataset.event = record.event;
    item.append(el("span", "seq", `#${record.seq} ${fmtTime(record.at)} `), el("span", "name", record.event), document.createTextNode(" "));
    item.append(el("span", "text", describe(record.event, data)));
    if (record.event === "turn" && data.session && data.turn) {
      const read = el("button", "", "read");
      read.type = "button";
      read.addEventListener("click", () => readIri(`gliding://job/${current.job}/turn/${data.session}/${data.turn}`, 0));
      item.append(read);
    }
    $("events").append(item);
    while ($("events").children.length > MAX_EVENTS) $("events").firstChild.remove();
    $("events-count").textContent = `(${$("events").children.length})`;
    const box = $("events");
    box.scrollTop = box.scrollHeight;
    if (record.event === "role.started" || record.event === "role.finished") pipeline(record.event, data);
    else if (record.event === "check.report") check(data);
    else if (record.event === "turn") {
      current.calls.push(data);
      drawTokens();
      if (data.action === "run_checks") evidence(data);
    }
    else if (record.event.startsWith("approval.")) refreshApprovals();
    else if (record.event === "job.started" || record.event === "job.dispatched") refreshStatus();
  }

  function describe(name, data) {
    if (name === "turn") {
      return `${data.session || data.role} #${data.turn} ${data.action}: ${data.summary} `
        + `(prompt ${fmtInt(data.prompt_tokens)}, completion ${fmtInt(data.completion_tokens)})`;
    }
    if (name === "role.started") return `${data.role}${data.step ? ` step ${data.step}` : ""} cycle ${data.cycle}`;
    if (name === "role.finished") return `${data.role}: ${data.status} after ${data.turns} turn(s)`;
    if (name === "job.finished") return `outcome ${data.outcome}`;
    const text = JSON.stringify(data);
    return text.length > 400 ? `${text.slice(0, 400)}…` : text;
  }

  function pipeline(name, data) {
    const key = `${data.session || data.role}/${data.cycle ?? ""}/${data.attempt ?? ""}`;
    let entry = current.roles.get(key);
    if (!entry && name === "role.finished") {  // its start came from another cycle's key
      entry = [...current.roles.values()].reverse().find((e) => (e.data.session || e.data.role) === (data.session || data.role) && !e.finished);
    }
    if (!entry) {
      entry = { node: el("li", "running"), data: { ...data }, finished: null };
      current.roles.set(key, entry);
      $("pipeline").append(entry.node);
    }
    if (name === "role.finished") entry.finished = data;
    const d = entry.data;
    const node = entry.node;
    clear(node);
    node.className = entry.finished ? (entry.finished.status === "finished" ? "finished" : "other") : "running";
    node.append(el("div", "role", d.role + (d.step ? ` · ${d.step}` : "")));
    node.append(el("div", "detail", `cycle ${d.cycle ?? "–"}, attempt ${d.attempt ?? "–"}`));
    if (d.session && d.session !== d.role) node.append(el("div", "detail", `session ${d.session}`));
    node.append(el("div", "detail", `worker: ${d.worker || data.worker || "the job's process"}`));
    node.append(el("div", "detail", entry.finished
      ? `${entry.finished.status}, ${entry.finished.turns} turn(s)${entry.finished.replayed ? `, ${entry.finished.replayed} replayed` : ""}`
      : "running…"));
  }

  function check(data) {
    const box = $("checks");
    if (box.querySelector("p.muted")) clear(box);
    const item = el("div", data.passed ? "check" : "check failed");
    item.append(el("div", "", `${data.passed ? "✓ passed" : "✗ failed"} — cycle ${data.cycle}, attempt ${data.attempt}, next: ${data.next}`));
    if (data.failed && data.failed.length) {
      const list = el("ul");
      for (const evidence of data.failed) list.append(el("li", "", evidence));
      item.append(list);
    }
    box.append(item);
  }

  function evidence(data) {  // a check agent's run_checks call: what it saw, and its result
    const box = $("checks");
    if (box.querySelector("p.muted")) clear(box);
    const item = el("div", "check evidence");
    item.append(el("span", "", `${data.session || data.role} #${data.turn}: ${data.summary} `));
    const read = el("button", "", "read the evidence");
    read.type = "button";
    const iri = `gliding://job/${current.job}/result/${data.session || data.role}-${data.turn}-0`;
    read.addEventListener("click", () => readIri(iri, 0));
    item.append(read);
    box.append(item);
  }

  // -- tokens per model call, as an SVG chart ----------------------------------------------------

  function drawTokens() {
    const calls = current.calls;
    const width = 720, height = 240, left = 56, right = 24, top = 12, bottom = 34;
    const seen = new Map();  // session -> its compactions so far
    const points = calls.map((c, i) => {
      const session = c.session || c.role;
      const before = seen.get(session) || 0;
      const compacted = typeof c.compactions === "number" && c.compactions > before;
      if (typeof c.compactions === "number") seen.set(session, Math.max(before, c.compactions));
      return {
        i, label: `${c.role}#${c.turn}`, session,
        built: c.built_tokens ?? c.prompt_tokens ?? 0,
        naive: c.naive_tokens ?? null,
        cached: c.cached_tokens ?? null,
        source: c.cached_source || "",
        compacted,
      };
    });
    const top_ = Math.max(1, ...points.map((p) => Math.max(p.built, p.naive || 0, p.cached || 0)));
    const x = (i) => left + (calls.length === 1 ? (width - left - right) / 2 : i * (width - left - right) / (calls.length - 1));
    const y = (v) => top + (height - top - bottom) * (1 - v / top_);
    const chart = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "tokens per model call" });
    for (let k = 0; k <= 4; k++) {
      const v = Math.round(top_ * k / 4);
      chart.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
      chart.append(svg("text", { class: "tick", x: left - 6, y: y(v) + 3, "text-anchor": "end" }, fmtInt(v)));
    }
    chart.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }));
    chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
    const every = Math.max(1, Math.ceil(points.length / 12));
    for (const p of points) {
      if (p.compacted) {
        const mark = svg("line", { class: "compaction", x1: x(p.i), x2: x(p.i), y1: top, y2: height - bottom });
        mark.append(svg("title", {}, `compaction before ${p.label}`));
        chart.append(mark);
      }
      if (p.i % every === 0) chart.append(svg("text", { class: "tick", x: x(p.i), y: height - bottom + 14, "text-anchor": "middle" }, p.label));
    }
    chart.append(svg("text", { class: "tick", x: (left + width) / 2, y: height - 4, "text-anchor": "middle" }, "model calls, in order"));
    for (const series of ["built", "cached", "naive"]) {  // naive last: dashed, on top
      const present = points.filter((p) => p[series] !== null);
      if (!present.length) continue;
      chart.append(svg("polyline", { class: `line ${series}`, points: present.map((p) => `${x(p.i)},${y(p[series])}`).join(" ") }));
      for (const p of present) {
        const dot = svg("circle", { class: `dot ${series}`, cx: x(p.i), cy: y(p[series]), r: 3 });
        const what = series === "cached" ? `cached (${p.source || "unknown"})` : series === "naive" ? "naive prompt" : "prompt built";
        dot.append(svg("title", {}, `${p.label} (${p.session}): ${what} ${fmtInt(p[series])} tokens`));
        chart.append(dot);
      }
    }
    $("tokens").replaceChildren(chart);
    const built = points.reduce((s, p) => s + p.built, 0);
    const naive = points.reduce((s, p) => s + (p.naive || 0), 0);
    const cached = points.reduce((s, p) => s + (p.cached || 0), 0);
    const sources = [...new Set(points.map((p) => p.source).filter(Boolean))].join(", ");
    const compactions = points.filter((p) => p.compacted).length;
    let line = `${calls.length} call(s): ${fmtInt(built)} prompt tokens built`;
    if (naive) line += ` vs ${fmtInt(naive)} naive (${Math.round(100 * (1 - built / naive))}% fewer)`;
    if (sources) line += `; ${fmtInt(cached)} cached (${sources})`;
    line += `; ${compactions} compaction(s)`;
    $("tokens-total").textContent = line;
  }

  // -- approvals ----------------------------------------------------------------------------

  async function refreshApprovals() {
    const shown = current;
    let found;
    try {
      found = await api(`${jobPath(shown.job)}/approvals`);
    } catch (err) {
      showError(err.message);
      return;
    }
    if (current !== shown) return;
    const signature = JSON.stringify(found.approvals);
    if (signature === shown.approvals) return;  // unchanged: a note being typed stays
    shown.approvals = signature;
    const box = $("approvals");
    clear(box);
    const waiting = found.approvals.filter((a) => !a.answer);
    if (!waiting.length) box.append(el("p", "muted", "None."));
    for (const a of waiting) {
      const item = el("div", "approval");
      item.dataset.approval = a.approval;
      item.append(el("div", "", visible(`${a.role} (${a.session}, turn ${a.turn ?? "–"}) asks to run ${a.tool}: ${a.reason}`)));
      item.append(el("pre", "arguments", visible(JSON.stringify(a.arguments, null, 2))));
      item.append(el("div", "digest", `sha256 ${a.digest}`));
      if (a.deadline) item.append(el("div", "muted", `denied unless answered by ${fmtTime(a.deadline)}`));
      const note = el("input");
      note.type = "text";
      note.placeholder = "a note for the agent (optional)";
      note.maxLength = 2000;
      const approve = el("button", "approve", "Approve");
      const deny = el("button", "deny", "Deny");
      for (const [button, yes] of [[approve, true], [deny, false]]) {
        button.type = "button";
        button.addEventListener("click", async () => {
          approve.disabled = deny.disabled = true;
          try {
            await api(`${jobPath(shown.job)}/approvals/${encodeURIComponent(a.approval)}`, "POST",
              { approve: yes, note: note.value, digest: a.digest });
            showError("");
          } catch (err) {
            showError(err.message);
            approve.disabled = deny.disabled = false;
          }
          refreshApprovals();
        });
      }
      const row = el("div");
      row.append(note, document.createTextNode(" "), approve, document.createTextNode(" "), deny);
      item.append(row);
      box.append(item);
    }
    const answered = found.approvals.filter((a) => a.answer);
    if (answered.length) {
      box.append(el("p", "muted", `Answered: ${answered.map((a) => `${a.tool} ${a.answer.approved ? "approved" : "denied"} by ${a.answer.by}`).join("; ")}`));
    }
  }

  // -- the blackboard, as an SVG graph ------------------------------------------------------------

  async function loadBoard() {
    const shown = current;
    const node = $("board-node").value.trim();
    const query = node ? `?node=${encodeURIComponent(node)}&limit=120` : "?limit=120";
    let graph;
    try {
      graph = await api(`${jobPath(shown.job)}/board${query}`);
    } catch (err) {
      $("board").replaceChildren(el("p", "muted", `No blackboard to show: ${err.message}`));
      return;
    }
    if (current !== shown) return;
    drawBoard(graph);
  }

  function shortName(iri) {  // the last part of the IRI; turn/DA/1 keeps its session: DA/1
    const parts = iri.split(/[/#]/).filter(Boolean);
    const last = parts.pop() || iri;
    const tail = /^\d+$/.test(last) && parts.length ? `${parts.pop()}/${last}` : last;
    return tail.length > 22 ? `${tail.slice(0, 21)}…` : tail;
  }

  function drawBoard(graph) {
    const props = $("board-properties");
    clear(props);
    for (const p of graph.properties) props.append(el("dt", "", p.property), el("dd", "", p.value));
    if (!graph.nodes.length) {
      $("board").replaceChildren(el("p", "muted", "Nothing on the blackboard for this job yet."));
      return;
    }
    const nodes = graph.nodes.slice(0, 40);
    const width = 720, height = 420, cx = width / 2, cy = height / 2;
    const place = new Map();
    const degree = new Map();
    for (const e of graph.edges) for (const end of [e.source, e.target]) degree.set(end, (degree.get(end) || 0) + 1);
    // in the middle: the node asked for, else the best connected one (the job, usually)
    // around the node asked for; else the job's own node; else the one with most edges
    const job = nodes.find((n) => n.type === "Job");
    const center = graph.node || (job ? job.iri : nodes.reduce((a, b) => ((degree.get(b.iri) || 0) > (degree.get(a.iri) || 0) ? b : a)).iri);
    const ring = nodes.filter((n) => n.iri !== center);
    place.set(center, [cx, cy]);
    ring.forEach((n, k) => {
      const angle = 2 * Math.PI * k / Math.max(1, ring.length) - Math.PI / 2;
      place.set(n.iri, [cx + 0.40 * width * Math.cos(angle), cy + 0.40 * height * Math.sin(angle)]);
    });
    const picture = svg("svg", { class: "board", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "blackboard graph" });
    for (const e of graph.edges) {
      const a = place.get(e.source), b = place.get(e.target);
      if (!a || !b) continue;
      const line = svg("line", { class: "edge", x1: a[0], y1: a[1], x2: b[0], y2: b[1] });
      line.append(svg("title", {}, `${e.source} ${e.property} ${e.target}`));
      picture.append(line);
      if (graph.edges.length <= 16 || (e.source !== center && e.target !== center)) {
        picture.append(svg("text", { class: "edge-label", x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2 - 2, "text-anchor": "middle" }, e.property));
      }
    }
    for (const n of nodes) {
      const [x, y] = place.get(n.iri);
      const group = svg("g", { class: "node-group" });
      group.append(svg("circle", { class: n.iri === center ? "node center" : "node", cx: x, cy: y, r: 9 }));
      group.append(svg("text", { class: "node-label", x, y: y + 20, "text-anchor": "middle" }, `${n.type ? `${n.type}: ` : ""}${shortName(n.iri)}`));
      group.append(svg("title", {}, n.iri));
      group.addEventListener("click", () => {
        $("board-node").value = n.iri;
        $("iri").value = n.iri;
        loadBoard();
      });
      picture.append(group);
    }
    $("board").replaceChildren(picture);
  }

  // -- the archive ------------------------------------------------------------------------------

  async function readIri(iri, offset) {
    $("iri").value = iri;
    let page;
    try {
      page = await api(`/v1/iri?iri=${encodeURIComponent(iri)}&offset=${offset}`);
    } catch (err) {
      $("iri-meta").textContent = err.message;
      $("iri-content").textContent = "";
      $("iri-more").hidden = true;
      return;
    }
    $("iri-meta").textContent = `${page.kind}, ${page.media_type}, ${fmtInt(page.size)} bytes; bytes ${fmtInt(page.offset)}–${fmtInt(page.offset + page.length)}, sha256 ${page.sha256}`;
    $("iri-content").textContent = page.encoding === "utf-8" ? page.content : `(binary: ${fmtInt(page.length)} bytes, base64)\n${page.content}`;
    const more = $("iri-more");
    more.hidden = page.next_offset === null;
    more.onclick = () => readIri(iri, page.next_offset);
  }

  // -- wiring -----------------------------------------------------------------------------------

  function route() {
    const match = /^#job=(.+)$/.exec(window.location.hash);
    if (match) {
      const job = decodeURIComponent(match[1]);
      if (!current || current.job !== job) openJob(job);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("logout").addEventListener("click", async () => {
      await fetch("/logout", { method: "POST", headers: { [CSRF_HEADER]: csrf }, credentials: "same-origin" });
      window.location.assign("/");
    });
    $("board-form").addEventListener("submit", (e) => { e.preventDefault(); loadBoard(); });
    $("iri-form").addEventListener("submit", (e) => { e.preventDefault(); readIri($("iri").value.trim(), 0); });
    window.addEventListener("hashchange", route);
    refreshJobs().then(route);
    window.setInterval(refreshJobs, 3000);
  });
})();
