// A small markdown renderer that builds DOM nodes and never parses HTML: every piece of text
// becomes a text node, so no message (agent-written or not) can inject markup or script.

const LINK_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

export function safeHref(href) {
  try {
    const url = new URL(href, window.location.origin);
    return LINK_PROTOCOLS.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

function link(href, children) {
  const safe = safeHref(href);
  if (safe === null) return null;
  const a = el("a");
  a.href = safe;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  a.append(...children);
  return a;
}

// code span | [text](url) | **bold** | __bold__ | ~~strike~~ | *em* | _em_ | bare URL
const INLINE =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(([^)\s]+)\)|\*\*(\S[\s\S]*?)\*\*|(?<![\w])__(\S[\s\S]*?)__(?![\w])|~~(\S[\s\S]*?)~~|\*(\S[^*]*?)\*|(?<![\w])_(\S[^_]*?)_(?![\w])|(https?:\/\/[^\s<>]*[^\s<>.,;:!?'")\]])/g;

export function renderInline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[1] !== undefined) {
      const code = el("code");
      code.textContent = m[2];
      out.push(code);
    } else if (m[3] !== undefined) {
      const a = link(m[4], renderInline(m[3]));
      out.push(a ?? document.createTextNode(m[0]));
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const strong = el("strong");
      strong.append(...renderInline(m[5] ?? m[6]));
      out.push(strong);
    } else if (m[7] !== undefined) {
      const del = el("del");
      del.append(...renderInline(m[7]));
      out.push(del);
    } else if (m[8] !== undefined || m[9] !== undefined) {
      const em = el("em");
      em.append(...renderInline(m[8] ?? m[9]));
      out.push(em);
    } else {
      const a = link(m[10], [document.createTextNode(m[10])]);
      out.push(a ?? document.createTextNode(m[0]));
    }
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

function paragraph(lines) {
  const p = el("p");
  lines.forEach((line, index) => {
    if (index > 0) p.append(el("br"));
    p.append(...renderInline(line));
  });
  return p;
}

const FENCE = /^\s*(```|~~~)\s*([\w+-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.+?)\s*#*\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) root.append(paragraph(para));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end)
      const pre = el("pre");
      const code = el("code");
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join("\n");
      pre.append(code);
      root.append(pre);
      continue;
    }
    if (!line.trim()) {
      flush();
      i += 1;
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      flush();
      const h = el(`h${Math.min(6, heading[1].length + 2)}`);
      h.append(...renderInline(heading[2]));
      root.append(h);
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      root.append(el("hr"));
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && QUOTE.test(lines[i])) quoted.push(lines[i++].match(QUOTE)[1]);
      const blockquote = el("blockquote");
      blockquote.append(renderMarkdown(quoted.join("\n")));
      root.append(blockquote);
      continue;
    }
    const bullet = BULLET.test(line);
    const numbered = NUMBERED.exec(line);
    if (bullet || numbered) {
      flush();
      const pattern = bullet ? BULLET : NUMBERED;
      const list = el(bullet ? "ul" : "ol");
      if (numbered && numbered[1] !== "1") list.start = Number(numbered[1]);
      while (i < lines.length && pattern.test(lines[i])) {
        const match = lines[i++].match(pattern);
        const item = el("li");
        item.append(...renderInline(bullet ? match[1] : match[2]));
        list.append(item);
      }
      root.append(list);
      continue;
    }
    para.push(line);
    i += 1;
  }
  flush();
  return root;
}
