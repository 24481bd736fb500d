import { quote } from "shell-quote";

// The forwarder an agent zone with an allowlisted network starts inside itself (DESIGN §6.7): the zone has
// nothing but loopback, so 127.0.0.1:<port>, which HTTP_PROXY names, is relayed to the runner's proxy on
// its Unix socket (agent-proxy.ts), bound into the zone.

/** The source of the in-zone forwarder: a CommonJS Node script run as `node forwarder.cjs <tcpPort> <socketPath>` that listens on 127.0.0.1:<tcpPort> and pipes each TCP connection to the Unix socket, printing "ready\n" on stdout once listening. */
export const FORWARDER_SOURCE: string = String.raw`"use strict";
// loopwarden's in-zone forwarder: 127.0.0.1:<tcpPort> -> the proxy's Unix socket, byte for byte.
const net = require("node:net");
const port = Number(process.argv[2]);
const socketPath = process.argv[3];
if (!Number.isInteger(port) || port < 1 || port > 65535 || !socketPath) {
  process.stderr.write("usage: node forwarder.cjs <tcpPort> <socketPath>\n");
  process.exit(2);
}
// Half-open on both sides, so a client that shuts its side after sending still gets the whole answer.
const server = net.createServer({ allowHalfOpen: true }, (client) => {
  const upstream = net.connect({ path: socketPath, allowHalfOpen: true });
  client.on("error", () => upstream.destroy());
  upstream.on("error", () => client.destroy());
  client.on("close", (hadError) => { if (hadError) upstream.destroy(); });
  upstream.on("close", (hadError) => { if (hadError) client.destroy(); });
  client.pipe(upstream);
  upstream.pipe(client);
});
server.on("error", (error) => {
  process.stderr.write("forwarder: " + error.message + "\n");
  process.exit(1);
});
server.listen(port, "127.0.0.1", () => process.stdout.write("ready\n"));
`;

/** The characters socat reads as address syntax: a socket path holding one is not given to socat. */
const SOCAT_SPECIAL = /[,:!\\"'()[\]{}\s]/;

/**
 * The shell lines that start the in-zone forwarder (127.0.0.1:`port` to the proxy's Unix socket) and
 * return once it listens, so the agent's first request finds it. socat, where the machine has it (a
 * tool made for this, a few milliseconds to start; sandbox-runtime forwards the same way), else the Node
 * script FORWARDER_SOURCE at `script` (about 40 ms: Node's own start). Either relays byte for byte and
 * closes a connection once both sides have ended. `fifo` is a path in a directory the zone writes (its
 * private /tmp), where the forwarder says it listens.
 */
export function forwarderLines(options: { port: number; socketPath: string; socat: string | null; script: string; fifo: string }): string[] {
  const { port, socketPath, socat, fifo } = options;
  if (socat && !SOCAT_SPECIAL.test(socketPath)) {
    // `-d -d` makes socat say "listening on" once it does; what it says after (a line per connection) is
    // drained by `cat`, so it never blocks on a full pipe. `-t`: a side that has ended waits for the other
    // as long as the agent may run, as the Node forwarder's half-open sockets do.
    return [
      `mkfifo ${quote([fifo])}`,
      `${quote([socat, "-d", "-d", "-t", "86400", `TCP-LISTEN:${port},bind=127.0.0.1,reuseaddr,fork`, `UNIX-CONNECT:${socketPath}`])} 2>${quote([fifo])} &`,
      `exec 3<${quote([fifo])}`,
      `while IFS= read -r line <&3; do case "$line" in *" listening on "*) break;; esac; done`,
      "cat <&3 >/dev/null &",
      "exec 3<&-",
    ];
  }
  return [
    `mkfifo ${quote([fifo])}`,
    `${quote([process.execPath, options.script, String(port), socketPath])} > ${quote([fifo])} &`,
    `read -r ready < ${quote([fifo])}`,
  ];
}
