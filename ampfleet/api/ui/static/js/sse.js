// A Server-Sent Events parser (the WHATWG event-stream format) for text that arrives in
// chunks: push() the text as it comes; each complete frame goes to onFrame.

export class SseParser {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.buffer = "";
    this.event = "";
    this.data = [];
    this.lastEventId = null;
  }

  push(chunk) {
    this.buffer += chunk;
    // A trailing "\r" may be the first half of "\r\n": keep it until the next chunk.
    const lines = this.buffer.split(/\r\n|\n|\r(?!$)/);
    this.buffer = lines.pop();
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return; // a comment: keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value;
  }

  dispatch() {
    if (this.data.length) {
      this.onFrame({ event: this.event || "message", data: this.data.join("\n"), id: this.lastEventId });
    }
    this.event = "";
    this.data = [];
  }
}
