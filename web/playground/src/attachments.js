// Images and files in a user message (docs/protocols/agent/run-agent-input.md §3.4): the attach button's files as
// inline AG-UI parts (a base64 `data` source), and thumbnails of a message's stored images. A stored part's URL is
// the API's parts route, which needs the bearer token: an <img src> cannot send it, so the page fetches the bytes
// with the token and shows them through an object URL.

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/webp", "image/gif"]);

/** The bytes of a File as base64 (FileReader's data URL without its `data:...;base64,` prefix). */
function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] ?? "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/** An AG-UI `image` (or `document`) part carrying the file inline, with the type the browser gives the file (from
 * its name): the server checks the bytes against it and refuses a file that is not what it says. */
export async function partOf(file) {
  const mimeType = file.type || "application/octet-stream";
  const type = IMAGE_TYPES.has(mimeType) ? "image" : "document";
  return { type, source: { type: "data", value: await base64Of(file), mimeType }, metadata: { filename: file.name } };
}

/** A user message's content: its text alone, or its text and its parts (AG-UI 1.0 InputContent). */
export function contentOf(text, parts) {
  if (!parts.length) return text;
  return [...(text ? [{ type: "text", text }] : []), ...parts];
}

const objectUrls = new Map(); // part URL -> Promise of an object URL (each stored part is fetched once)

function objectUrlOf(url, headers) {
  if (!objectUrls.has(url)) {
    const loading = fetch(url, { headers: url.startsWith("/") ? headers : {} }).then(async (response) => {
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return URL.createObjectURL(await response.blob());
    });
    loading.catch(() => objectUrls.delete(url)); // a failed read is tried again on the next redraw
    objectUrls.set(url, loading);
  }
  return objectUrls.get(url);
}

/** Thumbnails of a history message's image parts (and the names of its other files), as one element. */
export function thumbnailsOf(parts, headers, h) {
  const box = h("span", { class: "parts", "data-testid": "message-parts" });
  for (const part of parts) {
    if (part.type !== "image") {
      box.append(h("span", { class: "file", "data-testid": "part-file" }, part.filename || part.mimeType));
      continue;
    }
    const size = part.width && part.height ? `${part.width}x${part.height}` : "";
    const img = h("img", {
      class: "thumb",
      "data-testid": "part-thumbnail",
      alt: [part.filename || "image", size].filter(Boolean).join(", "),
      title: [part.filename, size].filter(Boolean).join(", "),
    });
    objectUrlOf(part.url, headers)
      .then((src) => {
        img.src = src;
      })
      .catch((error) => {
        img.replaceWith(h("span", { class: "file", "data-testid": "part-unreadable" }, `image not readable (${error.message})`));
      });
    box.append(img);
  }
  return box;
}
