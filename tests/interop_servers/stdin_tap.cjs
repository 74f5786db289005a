// node --require stdin_tap.cjs SERVER...: append every chunk the server reads from its stdin to $BKMCP_STDIN_TAP.
// It hooks the stdin stream's push(), so a chunk is logged when the server reads it and reading starts only when
// the server starts it: the client sees the server's own reading (bkmcp's probe window watches exactly that).
"use strict";
const fs = require("fs");
const log = process.env.BKMCP_STDIN_TAP;
if (log) {
  const stdin = process.stdin;
  const push = stdin.push;
  stdin.push = function (chunk, encoding) {
    if (chunk !== null && chunk !== undefined) fs.appendFileSync(log, chunk);
    return push.call(this, chunk, encoding);
  };
}
