import os from "node:os";
import path from "node:path";
import type { Contract } from "#shared/wire/contract.js";
import { isWithin } from "../evaluation/environment.js";
import { judgingCommands } from "../evaluation/protected-files.js";
import { isConfined } from "../zones/isolation.js";
import { parse as parseShell } from "shell-quote";
import { SANDBOX_REMEDY, hiddenPaths, sandboxSupport, toolchainMounts } from "../zones/sandbox.js";
import { AGENT_PRESETS } from "./agent-presets.js";

// What `doctor` says of the two zones before a loop starts (DESIGN §6.7): whether they can be built
// here, whether the agent can reach what it needs and nothing more, and whether a mount hands it a
// credential store. `run`, `step` and `work` refuse where the first check fails (preflightZones), and
// `run` also where the agent's network cannot reach the model its CLI needs (preflightAgent).

/** One line of doctor's report about the zones. */
export interface ZoneCheck {
  check: string;
  status: "ok" | "warn" | "fail";
  detail: string;
}

// Directories that hold credentials of model CLIs, clouds, registries and keys: mounting one hands the
// agent every secret in it, when the contract could pass the one key it needs by name (agent.env).
const CREDENTIAL_DIRS = [
  ".claude",
  ".codex",
  ".gemini",
  ".config",
  ".aws",
  ".azure",
  ".ssh",
  ".gnupg",
  ".docker",
  ".kube",
  ".netrc",
  ".npmrc",
  ".pypirc",
  ".git-credentials",
  ".cargo/credentials.toml",
  ".local/share/loopwarden",
];

/** The credential store a mount exposes (the mount itself, inside one, or containing one), or null. */
export function credentialStoreIn(mount: string, home = os.homedir()): string | null {
  const dir = path.resolve(mount.startsWith("~/") ? path.join(home, mount.slice(2)) : mount);
  for (const name of CREDENTIAL_DIRS) {
    const store = path.join(home, name);
    if (isWithin(dir, store) || isWithin(store, dir)) return store;
  }
  return null;
}

/**
 * The absolute paths a command names that a zone would not see: under a private directory (/tmp, the
 * temporary directory, $HOME) or a hidden one, and not mounted back (`mounts`, PATH's toolchains).
 */
export function unseenPaths(command: string, mounts: readonly string[], home = os.homedir()): string[] {
  const privateRoots = ["/tmp", os.tmpdir(), home, ...hiddenPaths()];
  const readable = [...mounts.map((mount) => (mount.startsWith("~/") ? path.join(home, mount.slice(2)) : mount)), ...toolchainMounts(process.env, home)];
  const words = parseShell(command).filter((word): word is string => typeof word === "string");
  const files = words.flatMap((word) => {
    const value = word.includes("=") ? word.slice(word.indexOf("=") + 1) : word;
    return path.isAbsolute(value) ? [path.normalize(value)] : [];
  });
  return [...new Set(files)].filter((file) => privateRoots.some((root) => isWithin(file, root)) && !readable.some((dir) => isWithin(file, dir)));
}

/** The preset a command looks like it runs (its first word, after any VAR=value), if any. */
function presetOf(command: string): (typeof AGENT_PRESETS)[number] | undefined {
  const words = command.trim().split(/\s+/);
  const program = path.basename(words.find((word) => !/^[A-Za-z_][A-Za-z0-9_]*=/.test(word)) ?? "");
  return AGENT_PRESETS.find((preset) => program === preset.name);
}

/** Doctor's checks of the zones for `contract`, in the order they are printed. */
export async function zoneChecks(contract: Contract, env: NodeJS.ProcessEnv = process.env): Promise<ZoneCheck[]> {
  const checks: ZoneCheck[] = [];
  const support = await sandboxSupport();
  if (!isConfined(contract)) {
    checks.push({
      check: "zones",
      status: "warn",
      detail: `UNCONFINED (isolation: none or --unconfined): the agent and the gates run as you, and the receipt says so${support.available ? "" : `; this machine could not confine them: ${support.reason}`}`,
    });
    return checks;
  }
  checks.push(
    support.available
      ? {
          check: "zones",
          status: "ok",
          detail: "the agent and the gates run confined by bubblewrap (own PID namespace, read-only view, private /tmp and HOME)",
        }
      : { check: "zones", status: "fail", detail: `cannot confine the agent and the gates here: ${support.reason}; ${SANDBOX_REMEDY}` },
  );

  const agent = contract.agent;
  const network = agent.network ?? "none";
  const preset = presetOf(agent.run);
  if (network === "host") {
    checks.push({
      check: "agent network",
      status: "warn",
      detail: "host: the agent reaches every host the machine does; list what it needs in agent.network.allow instead",
    });
  } else if (network === "none") {
    checks.push(
      preset
        ? {
            check: "agent network",
            status: "fail",
            detail: `none, but the agent command runs ${preset.title}, which must reach ${preset.allow.join(", ")}: add them to agent.network.allow (\`loopwarden init --agent ${preset.name}\` writes them)`,
          }
        : { check: "agent network", status: "ok", detail: "none: the agent reaches no host" },
    );
  } else {
    const missing = preset ? preset.allow.filter((host) => !network.allow.includes(host)) : [];
    checks.push(
      missing.length > 0
        ? { check: "agent network", status: "warn", detail: `allowlist ${network.allow.join(", ")}; ${preset?.title} also needs ${missing.join(", ")}` }
        : { check: "agent network", status: "ok", detail: `only ${network.allow.join(", ")}, through the runner's auditing proxy` },
    );
  }

  const unset = (agent.env ?? []).filter((name) => env[name] === undefined);
  const needed = (preset?.env ?? []).filter((name) => !(agent.env ?? []).includes(name));
  if (unset.length > 0 || needed.length > 0) {
    const parts = [
      ...(unset.length > 0 ? [`agent.env names ${unset.join(", ")}, not set here`] : []),
      ...(needed.length > 0 ? [`${preset?.title} needs ${needed.join(", ")}, which agent.env does not name (the agent gets no other variables)`] : []),
    ];
    checks.push({ check: "agent variables", status: "warn", detail: parts.join("; ") });
  } else {
    checks.push({ check: "agent variables", status: "ok", detail: agent.env?.length ? `by name only: ${agent.env.join(", ")}` : "none beyond the loop's own" });
  }

  const stores = [...(agent.mounts ?? []), ...(contract.exec?.mounts ?? [])].flatMap((mount) => {
    const store = credentialStoreIn(mount);
    return store ? [`${mount} (${store})`] : [];
  });
  checks.push(
    stores.length > 0
      ? {
          check: "mounts",
          status: "warn",
          detail: `${stores.join(", ")} holds credentials, and the zone can read all of them: pass the one key the agent needs by name (agent.env) instead`,
        }
      : { check: "mounts", status: "ok", detail: "no credential store is mounted into a zone" },
  );
  const unseen = [
    ...unseenPaths(agent.run, agent.mounts ?? []).map((file) => `the agent command names ${file}`),
    ...judgingCommands(contract).flatMap(({ what, command }) => unseenPaths(command, contract.exec?.mounts ?? []).map((file) => `${what} names ${file}`)),
  ];
  checks.push(
    unseen.length > 0
      ? {
          check: "paths",
          status: "warn",
          detail: `${unseen.join("; ")}, which the zones do not share with the host (/tmp and $HOME are private and empty there, the repository and the state directory hidden): a command that reads it needs it mounted read-only (agent.mounts, exec.mounts) or moved into the repository`,
        }
      : { check: "paths", status: "ok", detail: "no command names a path the zones hide" },
  );
  checks.push({
    check: "gates' network",
    status: "ok",
    detail:
      (contract.exec?.network ?? "host") === "none"
        ? "none: the gates reach no host"
        : "the host's: write exec.network: none (with exec.setup for installs) to keep the gates from the network",
  });
  return checks;
}
