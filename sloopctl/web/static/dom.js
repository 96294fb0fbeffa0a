// Every node of the page is built here, and text goes in through textContent
// (or a Text node) only: nothing a daemon reply carries — a ticket's title or
// body, an agent's output, a reason — is ever parsed as HTML. There is no
// innerHTML anywhere in these modules; the Content-Security-Policy forbids
// inline script and style besides.

const SKIP = new Set([null, undefined, false]);

// h("a", {href: "/run/R1", class: "run"}, "R1") -> <a href="/run/R1" class="run">R1</a>
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (SKIP.has(value)) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "href") node.setAttribute("href", localHref(value));
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else node.setAttribute(key, String(value));
  }
  put(node, children);
  return node;
}

// Appends children: nodes as they are, anything else as text.
export function put(node, children) {
  for (const child of [children].flat(Infinity)) {
    if (SKIP.has(child)) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function replace(node, ...children) {
  node.replaceChildren();
  return put(node, children);
}

// Links stay on this gateway: a path, never a scheme a reply could smuggle in.
export function localHref(value) {
  const text = String(value);
  return text.startsWith("/") && !text.startsWith("//") ? text : "#";
}

export function section(title, ...children) {
  return h("section", {class: "card"}, h("h2", {}, title), ...children);
}

// A table that turns into labelled cards on a narrow screen (style.css). A row is
// its cells, or {cells, data}: data names what the row is (data-run="R7").
export function table(headers, rows, empty = "None.") {
  if (!rows.length) return h("p", {class: "muted"}, empty);
  const head = h("thead", {}, h("tr", {}, headers.map((name) => h("th", {scope: "col"}, name))));
  const body = h("tbody", {}, rows.map((row) => {
    const {cells, data} = Array.isArray(row) ? {cells: row, data: null} : row;
    return h("tr", {dataset: data}, cells.map((cell, index) => h("td", {"data-label": headers[index]}, cell)));
  }));
  return h("table", {class: "rows"}, head, body);
}

export function field(label, ...value) {
  return [h("dt", {}, label), h("dd", {}, ...value)];
}

export function fields(pairs) {
  return h("dl", {class: "fields"}, pairs.filter(Boolean).map(([label, ...value]) =>
    field(label, ...value)));
}
