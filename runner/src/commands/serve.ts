import path from "node:path";
import { formatDuration } from "#shared/duration.js";
import { findRunningCoordinator, startLocalCoordinator } from "../coordinator/local-coordinator.js";
import { emitResult, progress, type OutputMode } from "../output.js";
import { defaultStateDir } from "../paths.js";
import { lastActivity, stopCoordinator } from "../coordinator/warm-coordinator.js";
import type { LoginLink } from "#shared/wire/api.js";

/** A one-time login link as `serve` and `run` print it: the link, and how long it lasts. */
export function loginLinkLine(link: LoginLink): string {
  return `${link.url} (a one-time login link, for ${formatDuration(Math.max(0, Date.parse(link.expires_at) - Date.now()))})`;
}

/**
 * `loopwarden serve`: the local coordinator (workerd, from the state's runtime snapshot or through Miniflare) in the foreground until
 * SIGINT/SIGTERM. `--daemon --idle MS` is how a command starts a warm one (in a process of its own):
 * it also stops itself once no command has used it for MS. `--stop` stops whichever serves the state.
 */
export async function serveCommand(
  options: OutputMode & { port?: number | undefined; state?: string | undefined; stop?: boolean; daemon?: boolean; idle?: number | undefined },
): Promise<number> {
  const stateDir = options.state ? path.resolve(options.state) : defaultStateDir();
  if (options.stop) {
    const pid = await stopCoordinator(stateDir);
    emitResult(options, { status: "ok", stopped: pid, state_dir: stateDir }, [
      pid === null ? `no local coordinator is running for ${stateDir}` : `stopped the local coordinator for ${stateDir} (pid ${pid})`,
    ]);
    return 0;
  }
  const idle = options.daemon ? (options.idle ?? 0) : 0;
  if (options.daemon) {
    // Started by a command that found none: if another is serving this state by now, that one serves.
    const running = await findRunningCoordinator(stateDir);
    if (running) return 0;
  }
  const signals = watchSignals();
  try {
    return await serveUntil(signals, options, stateDir, idle);
  } finally {
    signals.close();
  }
}

/**
 * SIGINT and SIGTERM, listened for from before the coordinator's start until its stop, so none ever finds
 * `serve` without a listener: its default action would end the process and leave workerd, a process of
 * its own, serving the port. Until `started()`, a signal aborts `interrupt` with its name (the start
 * stops its runtime, then ends the process as the signal would have); after, it settles `stopped`.
 */
function watchSignals(): { interrupt: AbortSignal; stopped: Promise<void>; started(): void; close(): void } {
  const interrupt = new AbortController();
  let starting = true;
  let stop = () => {};
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  const onSignal = (name: NodeJS.Signals) => (starting ? interrupt.abort(name) : stop());
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return {
    interrupt: interrupt.signal,
    stopped,
    started: () => (starting = false),
    close: () => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    },
  };
}

/** Starts the coordinator, says where it is, and stops it on a signal or, as a daemon, once it has gone `idle` ms unused. */
async function serveUntil(
  signals: ReturnType<typeof watchSignals>,
  options: OutputMode & { port?: number | undefined; daemon?: boolean },
  stateDir: string,
  idle: number,
): Promise<number> {
  progress(options, `starting the local coordinator (state: ${stateDir})…`);
  const coordinator = await startLocalCoordinator({
    stateDir,
    ...(options.port === undefined ? {} : { port: options.port }),
    onNote: (text) => progress(options, text),
    ...(options.daemon ? { record: { daemon: true, idle_ms: idle } } : {}),
    interrupt: signals.interrupt,
  });
  signals.started();
  const { owner } = coordinator;
  // The dashboard opens logged in as the owner from a one-time link (DESIGN §11): the browser gets a
  // session cookie, never the token. A warm coordinator started for a command prints nothing anyone reads.
  // The client loads once the coordinator has started: its wire schemas are not what a start waits for.
  const { Client } = await import("../coordinator/client.js");
  const login = options.daemon ? null : await new Client(coordinator.url, { token: owner.token }).loginLink();
  // The owner token is shown once, when it is made (DESIGN §11); after that, where it is kept.
  const ownerLine =
    owner.file === null
      ? "  owner token: LOOPWARDEN_OWNER_TOKEN"
      : owner.created
        ? `  owner token (shown once; kept in ${owner.file}, mode 0600): ${owner.token}`
        : `  owner token: in ${owner.file}`;
  emitResult(
    options,
    {
      status: "ok",
      url: coordinator.url,
      pid: coordinator.pid,
      runtime_pid: coordinator.runtimePid,
      state_dir: stateDir,
      ...(owner.created ? { owner_token: owner.token } : {}),
      owner_token_file: owner.file,
      dashboard_url: `${coordinator.url}/loops`,
      ...(login ? { login_url: login.url } : {}),
    },
    [
      `loopwarden coordinator listening on ${coordinator.url}`,
      ...(login ? [`  dashboard: ${loginLinkLine(login)}; after that, ${coordinator.url}/loops asks for a token`] : []),
      `  state: ${stateDir} (log: ${path.join(stateDir, "logs", "coordinator.log")})`,
      ownerLine,
      options.daemon
        ? `  stops after ${formatDuration(idle)} without use, or with \`loopwarden serve --stop\``
        : `  use it from another shell with --server ${coordinator.url} --token <owner token> (or LOOPWARDEN_SERVER and LOOPWARDEN_TOKEN); stop with Ctrl-C`,
    ],
  );
  const started = Date.now();
  await new Promise<void>((resolve) => {
    void signals.stopped.then(resolve);
    if (!options.daemon || idle <= 0) return;
    // Idle: no command has touched the state's activity mark for `idle`.
    const timer = setInterval(
      () =>
        void lastActivity(stateDir).then((last) => {
          if (Date.now() - Math.max(last, started) > idle) resolve();
        }),
      Math.min(10_000, Math.max(250, Math.floor(idle / 4))),
    );
    timer.unref();
  });
  progress(options, "stopping the coordinator…");
  await coordinator.stop();
  return 0;
}
