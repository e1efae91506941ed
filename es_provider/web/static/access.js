// The access view: records that served one document, newest first. Values are only ever set as text.
"use strict";
const $ = (id) => document.getElementById(id);

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  row.appendChild(td);
}

async function find(event) {
  event.preventDefault();
  const ask = { document_id: $("document").value, limit: Number($("limit").value) };
  if ($("kb").value) ask.knowledge_id = $("kb").value;
  if ($("subject").value) ask.subject = $("subject").value;
  if ($("since").value) ask.since = $("since").value;
  const response = await fetch("/workbench/access/api/served", {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(ask),
  });
  if (response.status === 401) { window.location.reload(); return; }
  const answer = await response.json();
  const body = $("records").querySelector("tbody");
  body.replaceChildren();
  if (!response.ok) {
    $("summary").textContent = (answer.error && answer.error.message) || response.statusText;
    $("summary").className = "meta error";
    $("records").hidden = true;
    return;
  }
  $("summary").className = "meta";
  $("summary").textContent = `${answer.records.length} record(s) served ${ask.document_id}`;
  for (const r of answer.records) {
    const row = document.createElement("tr");
    cell(row, r.time);
    cell(row, r.subject);
    cell(row, r.acting_subject);
    cell(row, (r.tenants || []).join(", "));
    cell(row, r.app_id);
    cell(row, `${r.protocol} ${r.status}`);
    cell(row, r.credential);
    cell(row, (r.knowledge_ids || []).join(", "));
    cell(row, (r.served || []).filter((s) => s.document_id === ask.document_id)
      .map((s) => `${s.chunk_id} (${s.score === null ? "–" : s.score.toFixed(3)})`).join(", "));
    cell(row, [r.execution_id, r.run_id, r.trace_id, r.id].filter(Boolean).join(" · "));
    body.appendChild(row);
  }
  $("records").hidden = answer.records.length === 0;
}

$("lookup").addEventListener("submit", find);
