// The workbench page: no framework, no CDN. Content from documents is only ever set as text (textContent).
"use strict";
const $ = (id) => document.getElementById(id);
const NAMES = { sparktide: "SparkTide items", agentarts: "AgentArts records", dify: "Dify records", mcp: "MCP retrieve" };

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function call(path, body) {
  const response = await fetch(path, {
    method: body ? "POST" : "GET", credentials: "same-origin",
    headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined,
  });
  const answer = await response.json();
  if (response.status === 401) { window.location.reload(); }
  if (!response.ok) throw new Error((answer.error && answer.error.message) || response.statusText);
  return answer;
}

function question() {
  const ask = {
    knowledge_id: $("kb").value, tenant: $("tenant").value || null, subject: $("subject").value || null,
    top_k: Number($("topk").value), threshold: Number($("threshold").value), query: $("query").value,
  };
  if ($("mode").value) ask.mode = $("mode").value;
  if ($("condition").value.trim()) ask.metadata_condition = JSON.parse($("condition").value);
  return ask;
}

function showIdentity(identity) {
  $("identity").textContent = `as subject ${identity.subject || "(none)"} of tenant ${identity.tenants.join(", ") || "(none)"}; ` +
    `groups from the principal store: ${identity.groups.join(", ") || "none"}` +
    (identity.subject_active === false ? " (deactivated or deleted in the directory: its subject grants nothing)" : "");
}

// One protocol's body → [{title, score, id, citation, text}] in answer order.
function rows(name, body) {
  if (name === "sparktide") {
    return (body.items || body.documents || []).map((i) => ({
      title: i.title, score: i.score, id: `${i.documentId || ""} · ${i.id || i.chunkId || ""}`,
      citation: i.source ? [i.source.uri, i.source.page && `p. ${i.source.page}`].filter(Boolean).join(" ") : "",
      text: i.content }));
  }
  if (name === "mcp") {
    return body.structuredContent.chunks.map((c) => ({ title: c.title, score: c.score, id: `${c.document_id} · ${c.chunk_id}`,
      citation: [c.source.uri, c.source.page && `p. ${c.source.page}`].filter(Boolean).join(" "), text: c.content }));
  }
  if (name === "agentarts") {
    return body.search_result_list.map((r) => ({ title: r.title, score: r.score, id: `${r.file_id} · ${r.chunk_id}`,
      citation: "", text: r.content }));
  }
  return body.records.map((r) => ({ title: r.title, score: r.score, id: `${r.metadata.document_id} · ${r.metadata.chunk_id}`,
    citation: [r.metadata.uri, r.metadata.page && `p. ${r.metadata.page}`].filter(Boolean).join(" "), text: r.content }));
}

function showAnswers(answers) {
  const box = $("answers");
  box.replaceChildren();
  for (const name of ["sparktide", "agentarts", "dify", "mcp"]) {
    const answer = answers[name];
    const card = el("div", null, "protocol");
    card.id = `answer-${name}`;
    card.append(el("h2", NAMES[name]));
    if (answer.refused) {
      card.append(el("div", `refused: ${answer.refused} — ${answer.message}`, "error"));
      box.append(card);
      continue;
    }
    card.append(el("div", `appliedFilters ${JSON.stringify(answer.appliedFilters)} · mode ${answer.mode} · topK ${answer.top_k}` +
      ` · threshold ${answer.threshold} · ${answer.took_ms} ms`, "meta"));
    const items = rows(name, answer.body);
    if (!items.length) card.append(el("div", "no results", "meta"));
    items.forEach((row, i) => {
      const item = el("div", null, "item");
      const head = el("div", `${i + 1}. ${row.title || ""}`, "head");
      head.append(el("span", row.score === undefined ? "" : Number(row.score).toFixed(3), "score"));
      item.append(head, el("div", row.id, "meta"));
      if (row.citation) item.append(el("div", row.citation, "meta"));
      item.append(el("div", row.text, "text"));
      card.append(item);
    });
    const raw = el("details");
    raw.append(el("summary", "raw JSON"), el("pre", JSON.stringify(answer.body, null, 2)));
    card.append(raw);
    box.append(card);
  }
}

function showReasons(answer) {
  const box = $("reasons");
  box.replaceChildren();
  showIdentity(answer.identity);
  if (!answer.found) { box.append(el("p", answer.message || "nothing found", "error")); return; }
  if (answer.truncated) box.append(el("p", "only the first chunks of this document were read", "error"));
  box.append(el("p", `${answer.found} chunk(s); as answered by ${answer.protocol} with appliedFilters ${JSON.stringify(answer.appliedFilters)}`, "meta"));
  const table = el("table");
  const head = el("tr");
  ["chunk", "rule", "why"].forEach((h) => head.append(el("th", h)));
  table.append(head);
  for (const reason of answer.reasons) {
    const row = el("tr", null, `rule-${reason.rule}`);
    row.append(el("td", reason.chunk_id), el("td", reason.rule), el("td", reason.detail));
    table.append(row);
  }
  box.append(table);
}

async function start() {
  const setup = await call("/workbench/api/setup");
  for (const kb of setup.knowledge) {
    const option = el("option", `${kb.name} (${kb.id})`);
    option.value = kb.id;
    $("kb").append(option);
  }
  const modes = () => {
    const kb = setup.knowledge.find((k) => k.id === $("kb").value);
    $("mode").replaceChildren(el("option", "configured"));
    $("mode").firstChild.value = "";
    for (const mode of kb ? kb.modes : []) { const o = el("option", mode); o.value = mode; $("mode").append(o); }
  };
  $("kb").addEventListener("change", modes);
  modes();
  for (const subject of setup.subjects) { const o = el("option"); o.value = subject; $("subjects").append(o); }
  $("ask").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await call("/workbench/api/search", question());
      showIdentity(answer.identity);
      showAnswers(answer.answers);
    } catch (error) { $("answers").replaceChildren(el("p", error.message, "error")); }
  });
  $("whyform").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const ask = { ...question(), protocol: $("protocol").value };
      ask[$("is-chunk").checked ? "chunk_id" : "document_id"] = $("document").value;
      // The answers for the same question beside the explanation, so both speak of one identity.
      const [answer, reasons] = await Promise.all([call("/workbench/api/search", question()),
        call("/workbench/api/explain", ask)]);
      showAnswers(answer.answers);
      showReasons(reasons);
    }
    catch (error) { $("reasons").replaceChildren(el("p", error.message, "error")); }
  });
}

start().catch((error) => document.body.append(el("p", error.message, "error")));
