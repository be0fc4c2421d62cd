// The chat page (README, "The chat page and the Unix socket"): a client of the public API, nothing more.
// Reads /v1/agents and /v1/sessions, follows /v1/events with EventSource (which resumes with
// Last-Event-ID by itself), and posts messages, continuations and controls as any client would.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = "agents-server-token";
  const EVENT_KINDS = [
    "session.created", "session.updated", "session.deleted", "session.failed",
    "run.started", "run.stopped", "calls.deferred", "text.delta",
    "tool.started", "tool.progressed", "tool.completed", "tool.failed",
    "subcall.started", "subcall.completed", "subcall.failed", "hook.failed",
  ];

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    agents: [],
    agent: null,          // the agent of a new conversation
    sessionId: null,      // the open session
    view: null,           // its SessionView
    queued: [],           // its unread userMessage mail
    sessions: new Map(),  // top-level sessions: id -> SessionMetaView and its title
    search: "",           // the words the sessions list is searched for ("" lists them all)
    nextBefore: null,     // the list's next page (`before`), null on the last one
    olderShown: false,    // whether older pages than the newest were asked for
    children: [],         // the open session's helper sessions (SessionMetaViews)
    attachments: [],      // [{mime, base64, filename, size}]
    // Kept for every session the events mention, not only the open one: the first events of a
    // new session can arrive before the answer that tells the page its id.
    tools: new Map(),     // session id -> running tools: Map(tool_call_id -> {tool, progress})
    streamed: new Map(),  // session id -> text.delta pieces of its current step
    lastSeq: null,
    events: null,
    reconnects: 0,
    refreshTimer: null,
    listTimer: null,
    drawnTurns: 0,        // how many turns the open session had when last drawn
  };

  class ApiFailure extends Error {
    constructor(status, body) {
      super(body && body.message ? `${body.error}: ${body.message}` : `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  // A random UUID (version 4); crypto.randomUUID exists only on https and loopback pages.
  function newKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  // The statuses in which Pause and Resume are offered (Cancel only while running).
  const PAUSABLE = ["running", "ready", "waiting_external"];
  const RESUMABLE = ["paused", "failed", "ready"];

  // How many of a running bash tool's newest output lines the page keeps on show.
  const OUTPUT_LINES_SHOWN = 8;

  // Seconds between the tries of a request that starts or changes a run (docs/api.md §1.7).
  const RETRY_DELAYS = [0.5, 1, 2, 4];

  // With `idempotent`, the request carries one Idempotency-Key for all its tries: a try whose
  // answer was lost (the connection dropped, the server restarted) is sent again with the same
  // key, and the server answers the first answer instead of running it twice.
  async function api(method, path, body, { idempotent = false } = {}) {
    const headers = {};
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    if (idempotent) headers["Idempotency-Key"] = newKey();
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    for (let attempt = 0; ; attempt++) {
      const last = !idempotent || attempt >= RETRY_DELAYS.length;
      try {
        response = await fetch(path, init);
      } catch (failure) {
        if (last) throw failure;
        await new Promise((resolve) => setTimeout(resolve, RETRY_DELAYS[attempt] * 1000));
        continue;
      }
      if (response.status !== 409 || last || !(await inProgress(response.clone()))) break;
      await new Promise((resolve) => setTimeout(resolve, RETRY_DELAYS[attempt] * 1000));
    }
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      data = null;
    }
    if (response.status === 401 && config.auth) {
      askForToken("The server refused the token.");
    }
    if (!response.ok) throw new ApiFailure(response.status, data);
    return { status: response.status, data };
  }

  async function inProgress(response) {
    try {
      return (await response.json()).error === "idempotency_key_in_progress";
    } catch (error) {
      return false;
    }
  }

  // ---- small DOM helpers --------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function showError(target, error) {
    $(target).textContent = error ? String(error.message || error) : "";
  }

  function formatBytes(n) {
    const [unit, size] = n >= 1024 * 1024 ? ["MiB", n / (1024 * 1024)] : n >= 1024 ? ["KiB", n / 1024] : ["bytes", n];
    return `${Number.isInteger(size) ? size : size.toFixed(2)} ${unit}`;
  }

  // ---- markdown: a small, safe subset (every character is escaped text; links http(s) only) --

  function inlineMarkdown(text) {
    const out = document.createDocumentFragment();
    const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|(\[[^\]]+\]\((https?:\/\/[^)\s]+)\))/g;
    let last = 0;
    let match;
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) out.append(text.slice(last, match.index));
      const token = match[0];
      if (match[1]) out.append(el("code", { text: token.slice(1, -1) }));
      // what bold, italic and a link's label hold is inline markdown too (`**\`name\`**`)
      else if (match[2]) out.append(el("strong", {}, inlineMarkdown(token.slice(2, -2))));
      else if (match[3]) out.append(el("em", {}, inlineMarkdown(token.slice(1, -1))));
      else {
        const label = token.slice(1, token.indexOf("]("));
        out.append(el("a", { href: match[5], rel: "noopener noreferrer", target: "_blank" }, inlineMarkdown(label)));
      }
      last = match.index + token.length;
    }
    if (last < text.length) out.append(text.slice(last));
    return out;
  }

  function markdown(source) {
    const root = el("div", { class: "markdown" });
    const lines = String(source || "").split("\n");
    let list = null;
    let paragraph = [];
    const flush = () => {
      if (paragraph.length) {
        const p = el("p");
        paragraph.forEach((line, i) => {
          if (i) p.append(el("br"));
          p.append(inlineMarkdown(line));
        });
        root.append(p);
      }
      paragraph = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.startsWith("```")) {
        flush();
        list = null;
        const code = [];
        for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
        root.append(el("pre", {}, el("code", { text: code.join("\n") })));
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      const bullet = /^\s*(?:[-*+]|\d+[.)])\s+(.*)$/.exec(line);
      if (heading) {
        flush();
        list = null;
        root.append(el(`h${Math.min(heading[1].length + 2, 6)}`, {}, inlineMarkdown(heading[2])));
      } else if (bullet) {
        flush();
        if (!list) {
          list = el(/^\s*\d/.test(line) ? "ol" : "ul");
          root.append(list);
        }
        list.append(el("li", {}, inlineMarkdown(bullet[1])));
      } else if (line.trim() === "") {
        flush();
        list = null;
      } else if (line.startsWith(">")) {
        flush();
        list = null;
        root.append(el("blockquote", {}, inlineMarkdown(line.replace(/^>\s?/, ""))));
      } else {
        list = null;
        paragraph.push(line);
      }
    }
    flush();
    return root;
  }

  // ---- rendering a session's turns ----------------------------------------------------------

  function mediaNode(item) {
    const mime = item.mimeType || item.mime || "application/octet-stream";
    const data = item.base64Data || item.base64 || "";
    const url = `data:${mime};base64,${data}`;
    const name = item.filename || mime;
    if (mime.startsWith("image/")) {
      return el("figure", { class: "media" }, el("img", { src: url, alt: name }), el("figcaption", { text: name }));
    }
    return el("a", { class: "media", href: url, download: item.filename || "attachment" }, name);
  }

  function isMedia(value) {
    return value && typeof value === "object" && typeof value.base64Data === "string";
  }

  function resultNode(value) {
    if (value === null || value === undefined) return el("em", { text: "no result yet" });
    if (typeof value === "string") return el("pre", { class: "result", text: value });
    if (isMedia(value)) return mediaNode(value);
    if (value.type === "text" && typeof value.content === "string") return el("pre", { class: "result", text: value.content });
    if (value.type === "json") return el("pre", { class: "result", text: JSON.stringify(value.content, null, 2) });
    if (value.type === "mixed" && Array.isArray(value.parts)) {
      return el("div", {}, value.parts.map((part) => (isMedia(part) ? mediaNode(part) : resultNode(part.text ?? part))));
    }
    return el("pre", { class: "result", text: JSON.stringify(value, null, 2) });
  }

  function argumentsText(call) {
    const raw = (call.function || {}).arguments || "";
    try {
      return JSON.stringify(JSON.parse(raw), null, 2);
    } catch (error) {
      return raw;
    }
  }

  function toolNode(call, stateLabel, result) {
    const name = (call.function || {}).name || "tool";
    return el(
      "details",
      { class: "tool", "data-tool": name, "data-state": stateLabel },
      el("summary", {}, el("code", { text: name }), " ", el("span", { class: "tool-state", text: stateLabel })),
      el("div", { class: "tool-body" },
        el("div", { class: "label", text: "arguments" }), el("pre", { class: "arguments", text: argumentsText(call) }),
        el("div", { class: "label", text: "result" }), resultNode(result)),
    );
  }

  function queryNodes(query) {
    if (query === null || query === undefined) return [];
    if (typeof query === "string") return query ? [el("div", { class: "text", text: query })] : [];
    const nodes = [];
    if (query.text) nodes.push(el("div", { class: "text", text: query.text }));
    for (const item of query.media || []) nodes.push(mediaNode(item));
    return nodes;
  }

  // What the person (or other mail) said in a user turn: folded mail one message at a time, so
  // messages queued while the session was busy read as they were sent.
  function userNodes(contents) {
    const mail = contents.userMail || [];
    if (!mail.length) return queryNodes(contents.userQuery);
    return mail.flatMap((envelope) => {
      const body = envelope.body || {};
      if (body.tag === "userMessage") {
        const marker = envelope.priority === "interrupt" ? "sent as an interrupt" : "sent while busy";
        return [el("div", { class: "mail", "data-mail": envelope.id }, el("span", { class: "label", text: marker }),
          queryNodes(body.query))];
      }
      const sender = (envelope.from || {}).tag || "mail";
      return [el("details", { class: "mail other" }, el("summary", { text: `${body.tag || "mail"} from ${sender}` }),
        el("pre", { text: JSON.stringify(body, null, 2) }))];
    });
  }

  function turnNode(turn, atTurn) {
    const contents = turn.contents || {};
    const fork = el("button", {
      type: "button", class: "fork", title: "Fork the session here: a new session keeps this turn and the ones before",
      onclick: () => forkAt(atTurn),
    }, "Fork here");
    if (turn.tag === "LlmTurn") {
      const response = contents.llmResponse || {};
      const node = el("article", { class: "turn assistant", "data-turn": atTurn },
        el("header", {}, el("span", { class: "who", text: state.view ? state.view.agent : "assistant" }), fork));
      if (response.responseThinking) {
        node.append(el("details", { class: "thinking" }, el("summary", { text: "thinking" }), el("pre", { text: response.responseThinking })));
      }
      if (response.responseText) node.append(markdown(response.responseText));
      const calls = contents.llmToolCalls || [];
      if (calls.length) {
        const names = calls.flatMap((c, i) => [i ? ", " : "", el("code", { text: (c.function || {}).name || "tool" })]);
        node.append(el("div", { class: "calls" }, "calls ", names));
      }
      return node;
    }
    if (turn.tag === "PartialUserTurn" || turn.tag === "UserTurn") {
      const tools = turn.tag === "UserTurn"
        ? (contents.userToolResponses || []).map(([call, result]) => toolNode(call || {}, "Completed", result))
        : (contents.trackedCalls || []).map((tc) =>
          toolNode(tc.tcCall || {}, (tc.tcState || "") + (tc.tcDetached ? " (detached)" : ""), tc.tcResult));
      const said = userNodes(contents);
      const person = said.some((node) => !node.classList.contains("other"));
      return el("article", { class: `turn ${person ? "user" : "tools"}`, "data-turn": atTurn },
        el("header", {}, el("span", { class: "who", text: person ? "you" : "tools" }), fork),
        tools, said);
    }
    return el("article", { class: "turn other", "data-turn": atTurn },
      el("header", {}, el("span", { class: "who", text: turn.tag || "turn" }), fork),
      el("pre", { text: JSON.stringify(contents, null, 2) }));
  }

  function renderSession() {
    const view = state.view;
    const turns = $("turns");
    const opened = view && view.session_id === turns.dataset.session ? openedFolds(turns) : new Set();
    turns.dataset.session = view ? view.session_id : "";
    turns.replaceChildren();
    $("controls").hidden = !view;
    if (!view) {
      $("family").replaceChildren();
      $("session-title").textContent = state.agent ? `New conversation with ${state.agent}` : "Pick an agent to start";
      $("session-status").textContent = "";
      renderQueued();
      renderPending();
      renderLive();
      return;
    }
    $("session-title").textContent = `${view.agent} · ${view.session_id.slice(0, 8)}`;
    $("session-status").textContent = view.status + (view.status_detail ? `: ${view.status_detail}` : "");
    $("session-status").dataset.status = view.status;
    // only what the API would do something useful with (docs/api.md §7.6-7.8): Resume on an idle
    // session would start an empty run, Cancel without a run answers no_active_run
    $("btn-pause").hidden = !PAUSABLE.includes(view.status);
    $("btn-resume").hidden = !RESUMABLE.includes(view.status);
    $("btn-cancel").hidden = view.status !== "running";
    renderFamily();
    const list = (view.session && view.session.turns) || [];
    // turns are stored newest first; a conversation reads oldest first
    for (let i = list.length - 1; i >= 0; i--) turns.append(turnNode(list[i], i));
    restoreOpened(turns, opened);
    renderQueued();
    renderPending();
    renderLive();
    // follow the conversation as it grows, but leave a reader where they are otherwise
    if (list.length !== state.drawnTurns) turns.lastElementChild && turns.lastElementChild.scrollIntoView({ block: "end" });
    state.drawnTurns = list.length;
  }

  // The helper sessions this one called (its children) and, in a helper's session, the way back.
  function renderFamily() {
    const box = $("family");
    box.replaceChildren();
    const view = state.view;
    if (view.parent_session_id) {
      box.append(el("a", { class: "parent-link", href: `#session=${view.parent_session_id}` },
        `← back to the calling session (${view.parent_session_id.slice(0, 8)})`));
    }
    if (state.children.length) {
      box.append(el("span", { class: "label", text: "helper sessions:" }),
        el("ul", { class: "children" }, state.children.map((child) => el("li", {},
          el("a", { class: "child-link", href: `#session=${child.session_id}`, "data-child": child.session_id },
            `${child.agent} · ${child.title || child.session_id.slice(0, 8)}`),
          " ", el("span", { class: "status", "data-status": child.status, text: child.status })))));
    }
  }

  // What the person unfolded stays unfolded when the session is drawn again: folds are keyed
  // by their turn's position from the oldest (stable as turns are added) and their rank in it.
  function openedFolds(turns) {
    const keys = new Set();
    turns.querySelectorAll("article.turn").forEach((article, position) => {
      article.querySelectorAll("details").forEach((fold, rank) => fold.open && keys.add(`${position}:${rank}`));
    });
    return keys;
  }

  function restoreOpened(turns, keys) {
    turns.querySelectorAll("article.turn").forEach((article, position) => {
      article.querySelectorAll("details").forEach((fold, rank) => {
        if (keys.has(`${position}:${rank}`)) fold.open = true;
      });
    });
  }

  function renderQueued() {
    const box = $("queued");
    box.replaceChildren();
    for (const envelope of state.queued) {
      const query = (envelope.body || {}).query;
      const text = typeof query === "string" ? query : (query && query.text) || "";
      box.append(el("div", { class: "queued-message" },
        el("span", { class: "label", text: envelope.priority === "interrupt" ? "queued (interrupt)" : "queued" }), " ", text));
    }
  }

  function renderPending() {
    const box = $("pending");
    box.replaceChildren();
    const calls = (state.view && state.view.pending) || [];
    for (const call of calls) box.append(pendingForm(call));
  }

  function pendingForm(call) {
    const reason = (call.disposition || {}).reason;
    const textarea = el("textarea", { name: "result", rows: 3, placeholder: "The tool's result: Ctrl+Enter answers",
      "aria-label": `Result of ${call.tool}` });
    const kind = el("select", { name: "kind" }, el("option", { value: "text", text: "text" }), el("option", { value: "json", text: "JSON" }));
    const error = el("p", { class: "error", role: "alert" });
    const form = el("form", { class: "pending-call", "data-token": call.continuation_token },
      el("div", {}, el("strong", { text: "Waiting for you: " }), el("code", { text: call.tool }), reason ? ` (${reason})` : ""),
      el("pre", { class: "arguments", text: argumentsText(call.call || {}) }),
      textarea,
      el("div", { class: "composer-actions" }, el("label", {}, "as ", kind), el("span", { class: "spacer" }),
        el("button", { type: "submit", text: "Answer" })),
      error);
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let result = textarea.value;
      if (kind.value === "json") {
        try {
          result = { type: "json", content: JSON.parse(textarea.value) };
        } catch (failure) {
          error.textContent = `Not valid JSON: ${failure.message}`;
          return;
        }
      }
      try {
        const answer = await api("POST", `/v1/continuations/${encodeURIComponent(call.continuation_token)}`, { result }, { idempotent: true });
        applyView(answer.data);
      } catch (failure) {
        error.textContent = failure.message;
      }
    });
    return form;
  }

  function renderLive() {
    const box = $("live");
    box.replaceChildren();
    for (const [id, tool] of state.tools.get(state.sessionId) || []) {
      box.append(el("div", { class: "running-tool", "data-call": id },
        el("span", { class: "spinner", "aria-hidden": "true" }), "running ", el("code", { text: tool.tool }),
        tool.progress ? ` ${tool.progress}` : "",
        tool.output && tool.output.length
          ? el("pre", { class: "tool-output" }, tool.output.map(({ stream, line }, i) =>
            el("span", { class: `line ${stream}`, text: (i ? "\n" : "") + line })))
          : null));
    }
    const streamed = state.streamed.get(state.sessionId);
    if (streamed) box.append(el("article", { class: "turn assistant streaming" }, markdown(streamed)));
  }

  // ---- sessions list and agents -------------------------------------------------------------

  function renderAgents() {
    const list = $("agents");
    list.replaceChildren();
    for (const agent of state.agents) {
      const tools = agent.tools || [];
      list.append(el("li", { class: state.agent === agent.slug && !state.sessionId ? "active" : null },
        el("button", { type: "button", class: "agent", "data-agent": agent.slug, onclick: () => pickAgent(agent.slug) },
          el("strong", { text: agent.slug }), el("span", { class: "description", text: agent.description || "" })),
        tools.length ? el("details", { class: "agent-tools" }, el("summary", { text: `${tools.length} tools` }),
          el("ul", {}, tools.map((name) => el("li", {}, el("code", { text: name }))))) : null));
    }
  }

  function renderSessions() {
    const list = $("sessions");
    list.replaceChildren();
    const rows = [...state.sessions.values()].sort((a, b) => (a.updated_at < b.updated_at ? 1 : a.updated_at > b.updated_at ? -1 : 0));
    for (const meta of rows) {
      list.append(el("li", { class: meta.session_id === state.sessionId ? "active" : null },
        el("button", { type: "button", class: "session", "data-session": meta.session_id, onclick: () => openSession(meta.session_id),
          "aria-current": meta.session_id === state.sessionId ? "true" : null },
          el("span", { class: "title", text: meta.title || "(nothing said yet)" }),
          el("strong", { text: meta.agent }), " ", el("span", { class: "status", "data-status": meta.status, text: meta.status }),
          el("span", { class: "when", text: `${meta.session_id.slice(0, 8)} · ${new Date(meta.updated_at).toLocaleString()}` }))));
    }
    if (!rows.length) list.append(el("li", { class: "empty", text: state.search ? `no session says “${state.search}”` : "no session yet" }));
  }

  async function loadAgents() {
    state.agents = (await api("GET", "/v1/agents")).data;
    renderAgents();
  }

  // The list, or with a search the sessions that say its words (`q`, docs/api.md §7.2), a page
  // at a time: "Older sessions" asks for the page before the oldest row (`before`).
  const SESSIONS_PAGE = 50;

  async function fetchSessions(search, before) {
    const query = new URLSearchParams({ limit: String(SESSIONS_PAGE) });
    if (search) query.set("q", search);
    if (before) query.set("before", before);
    return (await api("GET", `/v1/sessions?${query}`)).data;
  }

  function showOlderButton(nextBefore) {
    state.nextBefore = nextBefore;
    $("older-sessions").hidden = !nextBefore;
  }

  async function loadSessions() {
    const search = state.search;
    const page = await fetchSessions(search, null);
    if (search !== state.search) return;
    if (state.olderShown) {
      // older pages already shown stay: the newest page is merged in
      for (const meta of page.sessions) state.sessions.set(meta.session_id, meta);
    } else {
      state.sessions = new Map(page.sessions.map((meta) => [meta.session_id, meta]));
      showOlderButton(page.next_before);
    }
    renderSessions();
  }

  async function loadOlderSessions() {
    const search = state.search;
    const page = await fetchSessions(search, state.nextBefore);
    if (search !== state.search) return;
    for (const meta of page.sessions) state.sessions.set(meta.session_id, meta);
    state.olderShown = true;
    showOlderButton(page.next_before);
    renderSessions();
  }

  async function searchSessions() {
    state.search = $("session-search").value.trim();
    state.olderShown = false;
    state.sessions = new Map();
    showError("search-error", null);
    try {
      await loadSessions();
    } catch (error) {
      showError("search-error", error);
    }
  }

  function scheduleSessionsReload() {
    clearTimeout(state.listTimer);
    state.listTimer = setTimeout(() => loadSessions().catch((e) => showError("notice", e)), 150);
  }

  function pickAgent(slug) {
    state.agent = slug;
    state.sessionId = null;
    state.view = null;
    state.queued = [];
    showInAddress(null);
    closeMenu();
    renderAgents();
    renderSessions();
    renderSession();
    $("prompt").focus();
  }

  // The open session is the address's `#session=<id>`: each switch is a step of the tab's
  // history (back and forward walk them), and a link pasted into the tab opens its session.
  function sessionInAddress() {
    const match = /^#session=([0-9a-fA-F-]{36})$/.exec(location.hash);
    return match ? match[1].toLowerCase() : null;
  }

  function showInAddress(id) {
    if (sessionInAddress() === id) return;
    history.pushState(null, "", id ? `#session=${id}` : "#");
  }

  function followAddress() {
    if ($("app").hidden) return;
    const id = sessionInAddress();
    if (id && id !== state.sessionId) openSession(id);
    else if (!id && state.sessionId) pickAgent(state.agent);
  }

  async function openSession(id) {
    if (state.sessionId !== id) {
      state.view = null;
      state.queued = [];
      state.children = [];
    }
    state.sessionId = id;
    showInAddress(id);
    closeMenu();
    renderSessions();
    await refreshSession();
  }

  async function refreshSession() {
    const id = state.sessionId;
    if (!id) return;
    try {
      const [view, mail, children] = await Promise.all([
        api("GET", `/v1/sessions/${id}`),
        api("GET", `/v1/sessions/${id}/mail?unread=true`),
        api("GET", `/v1/sessions?parent=${id}&limit=50`),
      ]);
      if (state.sessionId !== id) return;
      state.queued = mail.data.mail.filter((envelope) => (envelope.body || {}).tag === "userMessage");
      state.children = children.data.sessions;
      applyView(view.data);
    } catch (error) {
      if (error.status === 404) {
        state.view = null;
        state.sessionId = null;
        renderSession();
      }
      showError("notice", error);
    }
  }

  function scheduleRefresh() {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(refreshSession, 100);
  }

  function applyView(view) {
    if (!view || view.session_id !== state.sessionId) return;
    // a late answer must not undo a newer one
    if (state.view && state.view.session_id === view.session_id && view.version < state.view.version) return;
    state.view = view;
    state.agent = view.agent;
    if (view.status !== "running") {
      state.tools.delete(view.session_id);
      state.streamed.delete(view.session_id);
    }
    const meta = { ...view };
    delete meta.session;
    delete meta.pending;
    // the title comes with the list (docs/api.md §7.2): kept, or read again once there are turns
    const listed = state.sessions.get(view.session_id);
    meta.title = listed ? listed.title : null;
    if (!meta.title && ((view.session || {}).turns || []).length) scheduleSessionsReload();
    if (!view.parent_session_id && (listed || !state.search)) state.sessions.set(view.session_id, meta);
    showError("notice", null);
    renderSessions();
    renderSession();
  }

  // ---- actions ------------------------------------------------------------------------------

  async function send(interrupt) {
    const prompt = $("prompt").value;
    const media = state.attachments.map(({ mime, base64, filename }) => ({ mime, base64, filename }));
    if (!prompt.trim() && !media.length) return;
    showError("composer-error", null);
    try {
      if (!state.sessionId) {
        if (!state.agent) throw new Error("Pick an agent first.");
        const created = await api("POST", "/v1/sessions", { agent: state.agent, prompt, media }, { idempotent: true });
        clearComposer();
        state.sessionId = created.data.session_id;
        history.replaceState(null, "", `#session=${state.sessionId}`);
        applyView(created.data);
        // its first events may have come before this answer told the page its id: read it again
        await refreshSession();
      } else {
        const answer = await api("POST", `/v1/sessions/${state.sessionId}/messages`, { prompt, media, interrupt }, { idempotent: true });
        clearComposer();
        applyView(answer.data);
        await refreshSession();
      }
    } catch (error) {
      showError("composer-error", error);
    }
  }

  function clearComposer() {
    $("prompt").value = "";
    state.attachments = [];
    renderAttachments();
  }

  async function control(action) {
    if (!state.sessionId) return;
    try {
      await api("POST", `/v1/sessions/${state.sessionId}/${action}`, undefined, { idempotent: action === "resume" });
      await refreshSession();
    } catch (error) {
      showError("notice", error);
    }
  }

  async function forkAt(atTurn) {
    try {
      const fork = await api("POST", `/v1/sessions/${state.sessionId}/fork`, { at_turn: atTurn }, { idempotent: true });
      await openSession(fork.data.session_id);
    } catch (error) {
      showError("notice", error);
    }
  }

  // ---- attachments --------------------------------------------------------------------------

  function guessMime(file) {
    if (file.type) return file.type;
    if (/\.pdf$/i.test(file.name)) return "application/pdf";
    return "text/plain";
  }

  function readAsBase64(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function addFiles(files) {
    const refused = [];
    for (const file of files) {
      if (file.size > config.maxAttachmentBytes) {
        refused.push(`${file.name} is ${formatBytes(file.size)}, over the ${formatBytes(config.maxAttachmentBytes)} limit: not attached.`);
        continue;
      }
      state.attachments.push({ mime: guessMime(file), base64: await readAsBase64(file), filename: file.name, size: file.size });
    }
    showError("composer-error", refused.length ? refused.join(" ") : null);
    renderAttachments();
  }

  function renderAttachments() {
    const list = $("attachments");
    list.replaceChildren();
    state.attachments.forEach((item, index) => {
      list.append(el("li", { class: "attachment" }, `${item.filename} (${formatBytes(item.size)}) `,
        el("button", { type: "button", title: "Remove", onclick: () => { state.attachments.splice(index, 1); renderAttachments(); } }, "×")));
    });
  }

  // ---- live events --------------------------------------------------------------------------

  function setConnection(label) {
    const node = $("connection");
    node.textContent = label;
    node.dataset.state = label;
  }

  function connectEvents() {
    if (state.events) state.events.close();
    const params = new URLSearchParams();
    if (state.token) params.set("access_token", state.token);
    // a fresh EventSource does not send Last-Event-ID: say where we were
    if (state.lastSeq !== null) params.set("after", String(state.lastSeq));
    const query = params.toString();
    const source = new EventSource(`/v1/events${query ? `?${query}` : ""}`);
    state.events = source;
    source.addEventListener("open", () => {
      const reconnected = state.reconnects > 0;
      setConnection(reconnected ? "reconnected" : "live");
      if (reconnected) {
        // replayed events follow; the reads below catch up what they summarise
        scheduleSessionsReload();
        scheduleRefresh();
      }
    });
    source.addEventListener("error", () => {
      state.reconnects += 1;
      setConnection("reconnecting");
      if (source.readyState === EventSource.CLOSED) {
        // the browser gave up (an error answer): start a new stream from the last event seen
        setTimeout(() => state.events === source && connectEvents(), 1000);
      }
    });
    for (const kind of EVENT_KINDS) {
      source.addEventListener(kind, (message) => onEvent(kind, message));
    }
  }

  // Running tools and streamed text, by session.
  function trackLive(kind, sid, data) {
    if (kind === "text.delta") {
      state.streamed.set(sid, (state.streamed.get(sid) || "") + (data.text || ""));
      return;
    }
    if (!state.tools.has(sid)) state.tools.set(sid, new Map());
    const tools = state.tools.get(sid);
    if (kind === "tool.completed" || kind === "tool.failed") {
      tools.delete(data.tool_call_id);
      return;
    }
    const tool = tools.get(data.tool_call_id) || { tool: data.tool, progress: "", output: [] };
    if (kind === "tool.progressed" && typeof data.line === "string") {
      // a bash tool's newest output line (docs/tools.md §3.8): the last few are shown as they come
      tool.output.push({ stream: data.stream || "stdout", line: data.line });
      if (tool.output.length > OUTPUT_LINES_SHOWN) tool.output.shift();
      tool.progress = data.lines ? `${data.lines} ${data.lines === 1 ? "line" : "lines"} of ${data.stream || "output"}` : "";
    } else if (kind === "tool.progressed") {
      // an MCP server's progress: an amount, a total and a message, each optional
      const known = (value) => value !== undefined && value !== null && value !== "";
      const amount = known(data.progress) ? `${data.progress}${known(data.total) ? `/${data.total}` : ""}` : "";
      tool.progress = [amount, data.message].filter(known).join(" · ");
    }
    tools.set(data.tool_call_id, tool);
  }

  function onEvent(kind, message) {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    if (typeof data.seq === "number") {
      if (state.lastSeq !== null && data.seq <= state.lastSeq) return;
      state.lastSeq = data.seq;
    }
    const sid = data.session_id;
    const meta = state.sessions.get(sid);
    if (kind === "session.created" && !data.parent_session_id && !state.search) {
      state.sessions.set(sid, { title: null, ...data });
      renderSessions();
    } else if (kind === "session.updated" && meta) {
      state.sessions.set(sid, { ...meta, status: data.status, updated_at: data.updated_at, version: data.version });
      if (!meta.title) scheduleSessionsReload();
      renderSessions();
    } else if (kind === "run.stopped" && meta) {
      state.sessions.set(sid, { ...meta, status: data.status });
      renderSessions();
    } else if (kind === "session.deleted") {
      state.sessions.delete(sid);
      renderSessions();
    }
    if (kind === "text.delta" || kind.startsWith("tool.")) {
      trackLive(kind, sid, data);
      if (sid === state.sessionId) renderLive();
      if (kind === "text.delta" || kind === "tool.started" || kind === "tool.progressed") return;
    }
    if (kind === "session.updated" && data.head_turn && data.head_turn.tag === "LlmTurn") state.streamed.delete(sid);
    if (sid !== state.sessionId) return;
    if (kind === "session.deleted") {
      state.sessionId = null;
      state.view = null;
      renderSession();
      showError("notice", "This session was deleted.");
      return;
    }
    scheduleRefresh();
  }

  // ---- token --------------------------------------------------------------------------------

  function askForToken(reason) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    if (state.events) state.events.close();
    state.events = null;
    state.sessions.clear();
    state.agents = [];
    $("app").hidden = true;
    $("forget-token").hidden = true;
    $("token-prompt").hidden = false;
    $("token-error").textContent = reason || "";
    setConnection("signed out");
    $("token-input").focus();
  }

  async function start() {
    if (config.auth && !state.token) {
      askForToken("");
      return;
    }
    try {
      await loadAgents();
    } catch (error) {
      if (error.status !== 401) showError("token-error", error);
      return;
    }
    $("token-prompt").hidden = true;
    $("app").hidden = false;
    $("forget-token").hidden = !config.auth;
    await loadSessions().catch((error) => showError("notice", error));
    connectEvents();
    const id = sessionInAddress();
    if (id) await openSession(id);
    else renderSession();
  }

  // ---- wiring -------------------------------------------------------------------------------

  function closeMenu() {
    document.body.classList.remove("menu-open");
    $("menu-toggle").setAttribute("aria-expanded", "false");
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token-input").value = "";
    start();
  });
  $("forget-token").addEventListener("click", () => askForToken(""));
  $("menu-toggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("menu-open");
    $("menu-toggle").setAttribute("aria-expanded", String(open));
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send(false);
  });
  $("interrupt").addEventListener("click", () => send(true));
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send(false);
    }
  });
  $("file").addEventListener("change", async (event) => {
    await addFiles([...event.target.files]);
    event.target.value = "";
  });
  window.addEventListener("popstate", followAddress);
  window.addEventListener("hashchange", followAddress);
  let searchTimer = null;
  $("session-search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(searchSessions, 250);
  });
  $("older-sessions").addEventListener("click", () => {
    loadOlderSessions().catch((error) => showError("search-error", error));
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(searchTimer);
    searchSessions();
  });
  $("btn-pause").addEventListener("click", () => control("pause"));
  $("btn-resume").addEventListener("click", () => control("resume"));
  $("btn-cancel").addEventListener("click", () => control("cancel"));

  start();
})();
