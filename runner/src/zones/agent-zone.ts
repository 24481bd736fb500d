import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { appendFile, copyFile, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { quote } from "shell-quote";
import * as z from "zod";
import type { AgentConfinement } from "#shared/wire/confinement.js";
import type { Contract } from "#shared/wire/contract.js";
import { childEnv } from "../evaluation/environment.js";
import { UserError } from "../errors.js";
import { runCommand, type CommandResult } from "../process/exec.js";
import { gitDirOf, objectsDirOf } from "../process/git.js";
import { committedFiles, trackedFiles } from "../evaluation/protected-files.js";
import { blankClone, checkoutDetached } from "../process/git-clone.js";
import { setAsideWorkTree } from "../process/git-commits.js";
import { findExecutable, isProcessAlive } from "../process/processes.js";
import { onShutdown } from "../process/shutdown.js";
import { startAgentProxy, type AgentProxy } from "./agent-proxy.js";
import { FORWARDER_SOURCE, forwarderLines } from "./agent-forwarder.js";
import { isConfined, workspacesRoot } from "./isolation.js";
import { expandHome, hideFromZones, hideRepositoryOf, toolchainMounts, type ZoneSpec } from "./sandbox.js";
import { coolZones, warmZoneFor, zonesStarted } from "./warm-zones.js";

// The agent zone (DESIGN §6.7). Each agent run gets a workspace of its own: a fresh detached clone of the
// best-so-far outside the user's repository and the state directory, with no remote and hooks off. It
// runs there confined: a PID namespace (whatever it starts is gone when it ends), a read-only file
// system with only the workspace writable, private `/tmp` and `$HOME`, the user's repository, the
// state directory and the evaluation clones hidden, the network none, the host's, or an allowlist
// through the runner's auditing proxy, and only the variables the contract names. The runner then reads
// the tree it left as data (`snapshotWorkTree`), with its own git configuration.

/** A workspace made for one agent run. */
export interface Workspace {
  /** The clone the agent works in. */
  dir: string;
  /** The runner's own copy of the workspace's index, taken before the agent ran: out of the agent's reach. */
  index: string;
  /** Its tracked files, as the commit it was made at holds them (`committedFiles`): listed before the agent ran. */
  tracked?: Promise<string[]> | undefined;
}

/** This process's workspaces: a directory per process, removed with the process's stale clones' logic. */
function processRoot(): string {
  return path.join(workspacesRoot(), String(process.pid));
}

/** A blank clone for a workspace: no checkout yet, no remote, hooks off, `.loopwarden/` ignored. */
async function blankWorkspace(repo: string): Promise<string> {
  const root = processRoot();
  await mkdir(root, { recursive: true, mode: 0o700 });
  const dir = path.join(root, `ws-${randomBytes(4).toString("hex")}`);
  await blankClone(repo, dir);
  // The agent's own `git status` does not list its context files (`.loopwarden/agent/`) as its change.
  await appendFile(path.join(dir, ".git", "info", "exclude"), "/.loopwarden/\n");
  return dir;
}

// Workspaces made ahead, by repository: `prepareWorkspace` starts the next iteration's while the
// current candidate is evaluated, checked out at the best commit as it stands, which a rejection (the
// usual verdict) leaves as it is; after a promotion only the checkout of the new best is left to do.
const prepared = new Map<string, Promise<{ dir: string; commit: string | null }>>();

/**
 * Starts the next workspace of `repo` now (a clone checked out at `commit`), for the next `makeWorkspace`
 * to take; its tracked files are listed meanwhile too (`committedFiles`, which keeps them: usually the
 * best's are listed already), for the agent's context (issue 30: no git process between the verdict and
 * the agent run).
 */
export function prepareWorkspace(repo: string, commit: string): void {
  const key = path.resolve(repo);
  if (prepared.has(key)) return;
  const made = blankWorkspace(repo).then(async (dir) => {
    // Checked out by the next `makeWorkspace` when this fails.
    const checkedOut = await checkoutDetached(dir, commit).then(
      () => commit,
      () => null,
    );
    return { dir, commit: checkedOut };
  });
  committedFiles(repo, commit).catch(() => undefined);
  // A failure is met again by the workspace that takes it, which then makes its own.
  made.catch(() => undefined);
  prepared.set(key, made);
}

/** Removes the workspace `prepareWorkspace` started for `repo`, unless one took it. */
export async function dropPreparedWorkspace(repo: string): Promise<void> {
  const made = prepared.get(path.resolve(repo));
  prepared.delete(path.resolve(repo));
  const ahead = await made?.catch(() => null);
  if (!ahead) return;
  await coolZones(ahead.dir);
  await rm(ahead.dir, { recursive: true, force: true });
}

/**
 * Makes a workspace at `commit` (the best so far): a detached clone borrowing the repository's objects
 * (the one `prepareWorkspace` made when there is one), no remote, hooks off, and the runner's copy of
 * its index beside it, where the agent cannot see it.
 */
export async function makeWorkspace(repo: string, commit: string, loopId?: string): Promise<Workspace> {
  const made = prepared.get(path.resolve(repo));
  prepared.delete(path.resolve(repo));
  const ahead = await made?.catch(() => null);
  const dir = ahead?.dir ?? (await blankWorkspace(repo));
  try {
    if (ahead?.commit !== commit) await checkoutDetached(dir, commit);
    const index = path.join(path.dirname(dir), `index-${path.basename(dir).slice("ws-".length)}`);
    // Whose it is, so that a runner killed while the agent works leaves its edits to be set aside.
    const owner: WorkspaceOwner | null = loopId ? { repo: path.resolve(repo), loop_id: loopId, base: commit } : null;
    await Promise.all([copyFile(path.join(dir, ".git", "index"), index), owner ? writeFile(ownerFile(dir), JSON.stringify(owner)) : null]);
    const tracked = committedFiles(repo, commit)
      .catch(() => trackedFiles(dir))
      .catch((): string[] => []);
    return { dir, index, tracked };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

/** Removes a workspace and the runner's index of it. */
export async function removeWorkspace(workspace: Workspace): Promise<void> {
  await Promise.all([
    coolZones(workspace.dir),
    rm(workspace.dir, { recursive: true, force: true }),
    rm(workspace.index, { force: true }),
    rm(ownerFile(workspace.dir), { force: true }),
  ]);
}

/** Whose a workspace is: the repository, the loop and the commit the agent started from. */
const WorkspaceOwner = z.object({ repo: z.string(), loop_id: z.string(), base: z.string() });
type WorkspaceOwner = z.infer<typeof WorkspaceOwner>;

/** Where a workspace's owner is recorded: beside it, out of the agent's sight. */
function ownerFile(dir: string): string {
  return `${dir}.owner.json`;
}

/**
 * Settles the workspaces of runner processes that no longer exist (killed while an agent worked,
 * DESIGN §6.6): the tree an agent left in one of `repo`'s is set aside as a commit on the commit it
 * started from, under `refs/loopwarden/interrupted/<loop-id>/<time>` (read as data, with the runner's
 * own index, as a candidate is), and the workspace removed. Another repository's are left for it to
 * settle, unless that repository no longer exists; what holds none (a workspace made ahead, a proxy's
 * socket) is removed. Answers the refs made.
 */
export async function settleStaleWorkspaces(repo: string): Promise<string[]> {
  const kept: string[] = [];
  for (const entry of await readdir(workspacesRoot()).catch((): string[] => [])) {
    if (isProcessAlive(Number(entry))) continue;
    const root = path.join(workspacesRoot(), entry);
    let othersLeft = false;
    for (const name of (await readdir(root).catch((): string[] => [])).filter((file) => file.endsWith(".owner.json"))) {
      const owner = WorkspaceOwner.safeParse(JSON.parse(await readFile(path.join(root, name), "utf8").catch(() => "null")));
      if (!owner.success) continue;
      const dir = path.join(root, name.slice(0, -".owner.json".length));
      const index = path.join(root, `index-${path.basename(dir).slice("ws-".length)}`);
      if (owner.data.repo !== path.resolve(repo)) {
        // Kept for its repository's next run, unless that repository is gone: then nobody can want it.
        if (existsSync(owner.data.repo)) othersLeft = true;
        else await removeWorkspace({ dir, index });
        continue;
      }
      const ref = `refs/loopwarden/interrupted/${owner.data.loop_id}/${Date.now()}-${path.basename(dir)}`;
      if (await setAsideWorkTree(repo, dir, index, owner.data.base, ref, `loopwarden: edits of an agent run interrupted in loop ${owner.data.loop_id}`)) {
        kept.push(ref);
      }
      await removeWorkspace({ dir, index });
    }
    if (!othersLeft) await rm(root, { recursive: true, force: true });
  }
  return kept;
}

// What a confined agent gets of the runner's environment besides what the contract names: what a shell
// needs to find programs and speak the user's language, and nothing that names a credential.
const BASE_ENV = ["PATH", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "NO_COLOR", "TZ"];

/** The port the in-zone forwarder listens on: the zone has a network namespace of its own, so any port is free. */
const FORWARDER_PORT = 3128;

let proxy: { allow: string; started: Promise<AgentProxy> } | null = null;

let socat: Promise<string | null> | undefined;

/** socat's path when the machine has it, looked up once per process: the in-zone forwarder's faster way (`forwarderLines`). */
function socatPath(): Promise<string | null> {
  socat ??= findExecutable("socat");
  return socat;
}

/** The proxy for `allow`, started once per process (and stopped when it exits). */
function proxyFor(allow: readonly string[]): Promise<AgentProxy> {
  const key = [...allow].sort().join(",");
  if (proxy?.allow === key) return proxy.started;
  const previous = proxy;
  const started = (async () => {
    await previous?.started.then((running) => running.close()).catch(() => undefined);
    const dir = path.join(processRoot(), `proxy-${randomBytes(4).toString("hex")}`);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const running = await startAgentProxy({ allow, socketPath: path.join(dir, "proxy.sock") });
    onShutdown(() => running.close());
    return running;
  })();
  proxy = { allow: key, started };
  started.catch(() => {
    if (proxy?.started === started) proxy = null;
  });
  return started;
}

/** Stops the agent proxy this process started, if any. */
export async function closeAgentProxy(): Promise<void> {
  const running = proxy;
  proxy = null;
  await running?.started.then((started) => started.close()).catch(() => undefined);
}

/** When a run ends: the proxy stopped, the workspace made ahead removed, and this process's directory with them. */
export async function closeAgentZone(repo: string): Promise<void> {
  await zonesStarted();
  await Promise.all([closeAgentProxy(), dropPreparedWorkspace(repo)]);
  await rm(processRoot(), { recursive: true, force: true });
}

/** `~/x` for a path in the home directory, anything else as it is. */
function homeRelative(dir: string): string {
  const relative = path.relative(os.homedir(), dir);
  return relative !== "" && !relative.startsWith("..") && !path.isAbsolute(relative) ? `~/${relative}` : dir;
}

/** What one agent run did, and how it was confined. */
export interface ZonedAgentRun {
  result: CommandResult;
  confinement: AgentConfinement;
}

/** Mints the run's credential (`agent.credentials.mint`): the last line of its stdout; a failure stops the run. */
async function mintCredential(command: string, repo: string): Promise<string> {
  const minted = await new Promise<{ stdout: string; failure: string | null }>((resolve) => {
    execFile("/bin/sh", ["-c", command], { cwd: repo, env: childEnv(), timeout: 120_000, maxBuffer: 1024 * 1024 }, (error, stdout, stderr) => {
      const said = String(stderr).trim().split("\n").pop();
      resolve({
        stdout: String(stdout),
        failure: error ? `${error.killed ? "timed out" : `exited ${error.code ?? error.signal}`}${said ? `: ${said}` : ""}` : null,
      });
    });
  });
  // Only the last line: a minting tool's chatter on earlier lines of stdout is not the credential.
  const credential = minted.stdout.trim().split("\n").pop()?.trim() ?? "";
  if (minted.failure !== null || credential === "") {
    throw new UserError(
      `agent.credentials.mint ${minted.failure ?? "printed nothing"}, so the agent was not run: fix the command (it must print the credential on stdout)`,
    );
  }
  return credential;
}

/** Revokes the run's credential (`agent.credentials.revoke`); a failure is reported, never silent. */
async function revokeCredential(command: string, repo: string, name: string, value: string, note: (text: string) => void): Promise<void> {
  const revoked = await runCommand(command, { cwd: repo, timeoutMs: 120_000, env: childEnv({ [name]: value }) }).catch((error: unknown) => error as Error);
  if (revoked instanceof Error || revoked.exit_code !== 0 || revoked.timed_out) {
    note(
      `agent.credentials.revoke failed (${revoked instanceof Error ? revoked.message : `exit ${revoked.exit_code ?? revoked.signal}`}): revoke the credential by hand`,
    );
  }
}

/**
 * Runs the contract's agent command in `workspace`: confined (DESIGN §6.7) unless this run is not
 * (`isolation: none`, `--unconfined`), with the loop's variables in `loopEnv`. A per-run credential is
 * minted before and revoked after, whatever happens in between.
 */
export async function runAgentInZone(options: {
  repo: string;
  workspace: Workspace;
  contract: Contract;
  loopEnv: Record<string, string>;
  timeoutMs: number;
  onOutput?: ((chunk: Buffer) => void) | undefined;
  onNote: (text: string) => void;
}): Promise<ZonedAgentRun> {
  const { contract, workspace, repo } = options;
  const agent = contract.agent;
  const credentials = agent.credentials;
  const credential = credentials ? await mintCredential(credentials.mint, repo) : null;
  const revoke = credentials && credential !== null ? () => revokeCredential(credentials.revoke, repo, credentials.env, credential, options.onNote) : null;
  const unregister = revoke ? onShutdown(revoke) : null;
  try {
    const extra: Record<string, string> = { ...options.loopEnv, ...(credentials && credential !== null ? { [credentials.env]: credential } : {}) };
    if (!isConfined(contract)) {
      const result = await runCommand(agent.run, { cwd: workspace.dir, timeoutMs: options.timeoutMs, env: childEnv(extra), onOutput: options.onOutput });
      return { result, confinement: { mechanism: "none", network: "host", ...(credential !== null ? { credential: true } : {}) } };
    }
    return await runConfined(options, extra, credential !== null);
  } finally {
    unregister?.();
    await revoke?.();
  }
}

/** The zone of an agent run in `workspaceDir` (DESIGN §6.7), with the proxy that serves its allowlist, if any. */
async function agentZoneOf(
  contract: Contract,
  repo: string,
  workspaceDir: string,
): Promise<{ spec: ZoneSpec; named: string[]; toolchains: string[]; proxy: { running: AgentProxy; socat: string | null; script: string } | null }> {
  const agent = contract.agent;
  const objects = await objectsDirOf(repo);
  hideFromZones(repo);
  hideFromZones(await gitDirOf(repo));
  hideRepositoryOf(objects);
  const network = agent.network ?? "none";
  const named = (agent.mounts ?? []).map(expandHome);
  const toolchains = toolchainMounts();
  const spec: ZoneSpec = {
    writable: [workspaceDir],
    // The workspace borrows the repository's objects (`blankClone`): readable, so git works in it.
    readable: [...toolchains, ...named, objects],
    network: network === "host" ? "host" : "none",
    cwd: workspaceDir,
  };
  if (typeof network !== "object") return { spec, named, toolchains, proxy: null };
  const running = await proxyFor(network.allow);
  const socat = await socatPath();
  const script = path.join(path.dirname(running.socketPath), "forwarder.cjs");
  if (!socat) await writeFile(script, FORWARDER_SOURCE);
  spec.sockets = [running.socketPath];
  if (!socat) spec.readable = [...(spec.readable ?? []), script];
  return { spec, named, toolchains, proxy: { running, socat, script } };
}

/**
 * Starts the zone of the agent's next run (warm-zones.ts) in the workspace `prepareWorkspace` is making
 * for it, so the run does not wait for its zone to be built (issue 30). Nothing when the agent is not
 * confined or no workspace is being made ahead; a failure only means a cold start.
 */
export function warmAgentZone(repo: string, contract: Contract): void {
  if (!isConfined(contract)) return;
  const made = prepared.get(path.resolve(repo));
  if (made) warmZoneFor(made.then(async ({ dir }) => (await agentZoneOf(contract, repo, dir)).spec));
}

async function runConfined(options: Parameters<typeof runAgentInZone>[0], extra: Record<string, string>, minted: boolean): Promise<ZonedAgentRun> {
  const { contract, workspace, repo } = options;
  const agent = contract.agent;
  const network = agent.network ?? "none";
  const { spec, named, toolchains, proxy: served } = await agentZoneOf(contract, repo, workspace.dir);
  const env: NodeJS.ProcessEnv = {};
  for (const name of [...BASE_ENV, ...(agent.env ?? [])]) if (process.env[name] !== undefined) env[name] = process.env[name];
  Object.assign(env, extra, { HOME: os.homedir(), TMPDIR: "/tmp" });
  let command = agent.run;
  if (served) {
    const { running, socat, script } = served;
    running.takeAudit();
    const url = `http://127.0.0.1:${FORWARDER_PORT}`;
    Object.assign(env, { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, ALL_PROXY: url, all_proxy: url, NO_PROXY: "", no_proxy: "" });
    // The forwarder starts first and says when it listens; then the agent's shell replaces this one.
    command = [
      ...forwarderLines({ port: FORWARDER_PORT, socketPath: running.socketPath, socat, script, fifo: "/tmp/.loopwarden-forwarder" }),
      `exec /bin/sh -c ${quote([agent.run])}`,
    ].join("\n");
  }
  const result = await runCommand(command, { cwd: workspace.dir, timeoutMs: options.timeoutMs, env, zone: spec, onOutput: options.onOutput });
  const audit = served?.running.takeAudit();
  const confinement: AgentConfinement = {
    mechanism: "bwrap",
    network: typeof network === "object" ? "allow" : network,
    ...(typeof network === "object" ? { allow: [...network.allow] } : {}),
    // As the contract writes them, and toolchains under the home directory as `~/…`: the log is public.
    ...(named.length + toolchains.length > 0 ? { mounts: [...(agent.mounts ?? []), ...toolchains.map(homeRelative)] } : {}),
    ...(audit ? { hosts: audit.hosts, ...(audit.hosts_omitted > 0 ? { hosts_omitted: audit.hosts_omitted } : {}) } : {}),
    ...(minted ? { credential: true } : {}),
  };
  return { result, confinement };
}
