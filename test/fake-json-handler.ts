/**
 * The start of the fake servers' request handler in the smoke tests (Python source, spliced into their
 * scripts): class `H` with quiet logging and `send(code, obj)`, which answers `obj` as JSON. Each script
 * goes on with its own `do_GET` / `do_POST`, and must import `json` and `BaseHTTPRequestHandler`.
 */
export const JSON_HANDLER = String.raw`class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
`;
