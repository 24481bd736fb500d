import { existsSync, realpathSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { UserError } from "../errors.js";
import { isWithin } from "../evaluation/environment.js";
import { findExecutable, tryCommand } from "../process/processes.js";

// The walls between the agent and what decides (DESIGN §6.7). Both zones — the agent's and the exec
// zone, where gates, metrics and task checks run — are bubblewrap sandboxes: a PID namespace of their
// own (nothing started inside outlives the zone: when its first process ends the kernel kills the rest),
// a mount view in which the file system is read-only, `/tmp`, `$HOME` and `/run` are private and empty,
// the user's repository, the coordinator's state directory and every other clone are hidden, and only
// the zone's own directory is writable; and, unless the contract says otherwise, a network namespace
// with nothing but a loopback interface.
//
// Why bubblewrap: it is the sandbox Debian, Fedora and Arch ship (Flatpak's), it works unprivileged
// through user namespaces, and it is what Anthropic's sandbox-runtime uses on Linux. util-linux's
// `unshare` starts faster (7-9 ms against 12-28 ms here) but builds no mount view: hiding paths and
// making `/` read-only with it means a mount script of our own in the new namespace, which is exactly
// the code bubblewrap has already had audited. sandbox-runtime itself (`srt`) took about 500 ms a start.

/** What a zone may touch: the rest of the file system is read-only, and `hidden` paths are empty. */
export interface ZoneSpec {
  /** Directories the zone may write (its workspace or clone): bound read-write at the same path. */
  writable: string[];
  /** Paths it may read though they are under a hidden or private directory (toolchains, `agent.mounts`). */
  readable?: string[];
  /** Unix sockets bound into the zone at the same path (the agent's proxy). */
  sockets?: string[];
  /** `none`: a network namespace with only loopback; `host`: the host's network. */
  network: "none" | "host";
  /** Where the zone's commands start. */
  cwd: string;
}

/** Whether zones can be built here, and with what. */
export type SandboxSupport = { available: true; bwrap: string } | { available: false; reason: string };

/** How to make zones available where they are not: the one remedy every refusal names. */
export const SANDBOX_REMEDY =
  "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) on Linux with unprivileged user namespaces allowed (or run as root), " +
  "or opt out with `isolation: none` in the contract (or --unconfined), which the receipt then records";

// One zone built and torn down: what `probeSandbox` asks bubblewrap to do before any run relies on it.
const PROBE_ARGS = [
  "--ro-bind",
  "/",
  "/",
  "--dev",
  "/dev",
  "--proc",
  "/proc",
  "--tmpfs",
  "/tmp",
  "--unshare-pid",
  "--unshare-net",
  "--die-with-parent",
  "--",
  "/bin/true",
];

/**
 * Finds whether zones can be built on this machine, by building one: bubblewrap on PATH, able to make
 * PID and network namespaces and a mount view. Exported with the binary as a parameter for tests;
 * commands use `sandboxSupport()`, which probes once per process.
 */
export async function probeSandbox(bwrapPath?: string | null): Promise<SandboxSupport> {
  if (process.platform !== "linux") {
    return { available: false, reason: `the zones are built with Linux namespaces and this is ${process.platform} (macOS's Seatbelt is on the roadmap)` };
  }
  const bwrap = bwrapPath === undefined ? await findExecutable("bwrap") : bwrapPath;
  if (!bwrap) return { available: false, reason: "bubblewrap (bwrap) is not installed or not on PATH" };
  const failure = await tryCommand([bwrap, ...PROBE_ARGS]);
  if (failure !== null) return { available: false, reason: `bubblewrap cannot build a sandbox here: ${failure}` };
  return { available: true, bwrap };
}

let support: Promise<SandboxSupport> | undefined;

/** Whether this machine builds zones, probed on first use and remembered. */
export function sandboxSupport(): Promise<SandboxSupport> {
  support ??= probeSandbox();
  return support;
}

/** The refusal when the contract asks for zones (the default) and this machine cannot build them. */
export function sandboxUnavailable(reason: string): UserError {
  return new UserError(`the agent and the gates must run confined (DESIGN §6.7) and this machine cannot confine them: ${reason}. To fix: ${SANDBOX_REMEDY}`, 2);
}

/** bubblewrap's path, or the refusal: never an unconfined run in place of a confined one. */
export async function requireSandbox(): Promise<string> {
  const found = await sandboxSupport();
  if (!found.available) throw sandboxUnavailable(found.reason);
  return found.bwrap;
}

// Paths no zone may see, registered by whoever learns them: the user's repository (session), the local
// coordinator's state directory (connect), the clones' and workspaces' roots.
const hidden = new Set<string>();

/** Hides `dir` (and everything under it) from every zone this process builds from now on. */
export function hideFromZones(dir: string): void {
  hidden.add(path.resolve(dir));
  try {
    hidden.add(realpathSync(dir));
  } catch {
    // Not there yet: hidden by the name it will have.
  }
}

/**
 * Hides the repository an object store belongs to: its git directory and, when that is a `.git`, the
 * working tree beside it — the main checkout of a linked worktree the runner was started in, too. The
 * object store itself is then bound back read-only by the zones whose clones borrow it.
 */
export function hideRepositoryOf(objects: string): void {
  const gitDir = path.dirname(objects);
  hideFromZones(gitDir);
  if (path.basename(gitDir) === ".git") hideFromZones(path.dirname(gitDir));
}

/** Every path hidden from zones so far (for tests and doctor). */
export function hiddenPaths(): string[] {
  return [...hidden];
}

// Version managers keep a toolchain's binaries, libraries and shims under one directory in the home
// directory, which a zone sees empty: mounted read-only whenever PATH leads into the home directory.
// None of them holds credentials (~/.cargo does, so only its bin/ is mounted, as a PATH entry).
const TOOLCHAIN_HOMES = [".nvm", ".pyenv", ".rbenv", ".rustup", ".volta", ".asdf", ".sdkman", ".bun", ".deno", ".nodenv", ".goenv", ".fnm", ".jenv"];

/**
 * The directories a zone needs to read although they are under a private or hidden directory: PATH's
 * entries (and the version managers' homes they lead into) under the home directory or the temporary
 * directory, and the Node binary this runner runs with. Entries inside a hidden path (a repository's
 * `node_modules/.bin`) are never among them.
 */
export function toolchainMounts(env: NodeJS.ProcessEnv = process.env, home = os.homedir()): string[] {
  const privateRoots = [home, "/tmp", os.tmpdir()];
  const underPrivate = (dir: string) => privateRoots.some((root) => isWithin(dir, root));
  const isHidden = (dir: string) => [...hidden].some((secret) => isWithin(dir, secret));
  const mounts = new Set<string>();
  const consider = (dir: string) => {
    if (path.isAbsolute(dir) && underPrivate(dir) && !isHidden(dir) && existsSync(dir)) mounts.add(dir);
  };
  const entries = (env.PATH ?? "").split(path.delimiter).filter(Boolean);
  for (const entry of entries) consider(entry);
  if (entries.some((entry) => isWithin(entry, home) && entry !== home)) {
    for (const name of TOOLCHAIN_HOMES) consider(path.join(home, name));
  }
  consider(path.dirname(process.execPath));
  // A mount inside another is redundant.
  return [...mounts].filter((dir) => ![...mounts].some((other) => other !== dir && isWithin(dir, other))).sort();
}

/** A mount path as the contract writes it: `~/x` in the user's home directory, anything else as written. */
export function expandHome(mount: string): string {
  return mount.startsWith("~/") ? path.join(os.homedir(), mount.slice(2)) : mount;
}

/**
 * The bubblewrap arguments that run a command in a zone. Order matters: later mounts cover earlier ones,
 * so the read-only root comes first, then the private and hidden directories, then what is readable
 * inside them, then the zone's writable directories.
 */
export function zoneArgs(bwrap: string, spec: ZoneSpec, home = os.homedir()): string[] {
  const args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"];
  const privates = ["/tmp", "/run", "/var/tmp", "/dev/shm", home, os.tmpdir()];
  const covered: string[] = [];
  const cover = (dir: string) => {
    if (covered.some((done) => isWithin(dir, done)) || !existsSync(dir) || dir === "/") return;
    covered.push(dir);
    args.push("--tmpfs", dir);
  };
  for (const dir of privates) cover(dir);
  for (const dir of hidden) cover(dir);
  for (const dir of spec.readable ?? []) if (existsSync(dir)) args.push("--ro-bind", dir, dir);
  for (const socket of spec.sockets ?? []) args.push("--ro-bind", socket, socket);
  for (const dir of spec.writable) args.push("--bind", dir, dir);
  args.push("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session");
  if (spec.network === "none") args.push("--unshare-net");
  args.push("--chdir", spec.cwd, "--");
  return args;
}
