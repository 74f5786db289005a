// force_localhost.cjs — `node --require ./force_localhost.cjs <script>` preload.
//
// Third-party servers such as @modelcontextprotocol/server-everything call
// `app.listen(PORT)` with no host, which binds every interface (`::` / 0.0.0.0).
// bkmcp's interop tests must listen on loopback only, so this preload rewrites
// every TCP `net.Server.prototype.listen()` call (http, https, express, hono
// node-server all end up there) to bind FORCE_LISTEN_HOST (default 127.0.0.1),
// whatever host the caller asked for. Unix-socket / pipe / handle / fd listens
// are left alone. Each rewrite is reported once on stderr as
//   force_localhost: listen(<port>) -> <host>:<port>
// and after the bind as
//   force_localhost: listening on <host>:<port>
"use strict";

const net = require("net");

const HOST = process.env.FORCE_LISTEN_HOST || "127.0.0.1";
const origListen = net.Server.prototype.listen;

function isPortLike(v) {
  if (typeof v === "number") return true;
  if (typeof v === "string") return /^\s*\d+\s*$/.test(v); // numeric string = port; others are pipe paths
  return false;
}

function rewrite(args) {
  const a0 = args[0];
  if (a0 !== null && typeof a0 === "object") {
    // listen(options[, cb]) — also covers a handle object ({_handle} / {fd}), which we leave untouched.
    if (a0.path !== undefined || a0.handle !== undefined || a0._handle !== undefined || a0.fd !== undefined) {
      return null;
    }
    const opts = Object.assign({}, a0, { host: HOST });
    delete opts.ipv6Only;
    return [opts].concat(args.slice(1));
  }
  let port;
  let rest;
  if (a0 === undefined || typeof a0 === "function") {
    port = 0;
    rest = a0 === undefined ? args.slice(1) : args.slice(0);
  } else if (isPortLike(a0)) {
    port = a0;
    rest = args.slice(1);
  } else {
    return null; // pipe name
  }
  // listen(port, host, backlog, cb): drop the caller's host (a string, or a null/undefined placeholder).
  if (rest.length > 0 && (typeof rest[0] === "string" || rest[0] === null || (rest[0] === undefined && rest.length > 1))) {
    rest = rest.slice(1);
  }
  return [port, HOST].concat(rest);
}

// Exit with the parent: the pytest fixtures set BKMCP_INTEROP_PARENT_PID to their own pid, so a server
// does not outlive a test run that was SIGKILLed before its teardown.
const parentPid = Number(process.env.BKMCP_INTEROP_PARENT_PID || "");
if (Number.isInteger(parentPid) && parentPid > 0) {
  setInterval(() => {
    if (process.ppid !== parentPid) {
      process.stderr.write("force_localhost: parent process gone, exiting\n");
      process.exit(0);
    }
  }, 1000).unref();
}

net.Server.prototype.listen = function forcedListen(...args) {
  const newArgs = rewrite(args);
  if (newArgs === null) return origListen.apply(this, args);
  const shown = typeof newArgs[0] === "object" ? newArgs[0].port : newArgs[0];
  process.stderr.write(`force_localhost: listen(${shown === undefined ? "" : shown}) -> ${HOST}:${shown === undefined ? 0 : shown}\n`);
  this.once("listening", () => {
    const a = this.address();
    if (a && typeof a === "object") process.stderr.write(`force_localhost: listening on ${a.address}:${a.port}\n`);
  });
  return origListen.apply(this, newArgs);
};
