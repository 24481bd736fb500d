// The coding-agent CLIs `loopwarden init --agent NAME` knows, so that a confined agent works the first
// time (DESIGN §6.7): each preset is one headless run that reads program.md, makes its change and
// exits; the model endpoints its network allowlist must hold (anything else is refused by the
// runner's proxy); and the variables it needs, by name, which the runner passes from its own
// environment. A preset never mounts a credential directory (~/.claude, ~/.codex, …): the agent's
// $HOME is empty, and its key comes by name from the environment.
//
// The flags are those each tool documents for headless use (taken from its documentation when this
// table was written, and from its source and issue tracker for Codex's key and opencode's start-up
// downloads; a tool's flags can change between versions): Claude Code `-p` (print mode) with
// `--dangerously-skip-permissions`; Codex `codex exec` with `--full-auto`, which authenticates from
// CODEX_API_KEY; Gemini CLI `-p` with `--yolo`; aider's scripting options (`--message-file`,
// `--yes-always`); opencode `run`. The agent's stdin is /dev/null, so no tool waits for input.

/** A coding-agent CLI init knows: how it runs headless, what it must reach, and the variables it needs. */
export interface AgentPreset {
  /** What `--agent` takes. */
  name: string;
  /** The tool's name, for loop.yaml's comment and init's output. */
  title: string;
  /** agent.run: one non-interactive run that reads program.md, makes one change and exits. */
  run: string;
  /** agent.network.allow: the hosts (host:port) it must reach; the proxy refuses every other. */
  allow: readonly string[];
  /** agent.env: the variables it gets from the runner's environment, by name (its API key). */
  env: readonly string[];
  /** Comment lines for loop.yaml: why a flag or host is there, and what to change for another model. */
  notes: readonly string[];
}

/** The presets, in the order `--help` lists them. */
export const AGENT_PRESETS: readonly AgentPreset[] = [
  {
    name: "claude",
    title: "Claude Code",
    // Non-essential traffic (telemetry, error reports, the auto-updater) would only be refused by the proxy.
    run: `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude -p "$(cat program.md)" --dangerously-skip-permissions`,
    allow: ["api.anthropic.com:443"],
    env: ["ANTHROPIC_API_KEY"],
    notes: [
      "-p runs one prompt and exits; --dangerously-skip-permissions lets it edit and run commands",
      "without asking, which is safe here only because loopwarden confines it.",
    ],
  },
  {
    name: "codex",
    title: "Codex CLI",
    // codex exec authenticates from CODEX_API_KEY; it reads no OPENAI_API_KEY of its own.
    run: `CODEX_API_KEY="$OPENAI_API_KEY" codex exec --full-auto "$(cat program.md)"`,
    allow: ["api.openai.com:443"],
    env: ["OPENAI_API_KEY"],
    notes: [
      "codex exec runs one prompt and exits; --full-auto lets it edit the workspace without asking.",
      "It authenticates from CODEX_API_KEY, set here from your OPENAI_API_KEY.",
    ],
  },
  {
    name: "gemini",
    title: "Gemini CLI",
    run: `gemini -p "$(cat program.md)" --yolo`,
    allow: ["generativelanguage.googleapis.com:443"],
    env: ["GEMINI_API_KEY"],
    notes: ["-p runs one prompt headless and exits; --yolo accepts every action without asking."],
  },
  {
    name: "aider",
    title: "aider",
    // History files go to the private /tmp, not into the candidate; no .gitignore edit, no update check.
    run:
      "aider --model sonnet --message-file program.md --yes-always --no-auto-commits --no-gitignore --no-check-update --analytics-disable" +
      " --chat-history-file /tmp/aider.chat.history.md --input-history-file /tmp/aider.input.history",
    allow: ["api.anthropic.com:443"],
    env: ["ANTHROPIC_API_KEY"],
    notes: [
      "--message-file sends program.md once and exits, and the runner, not aider, commits",
      "(--no-auto-commits); its history files go to the private /tmp, out of the candidate. For",
      "another model, change --model and name its host and key (api.openai.com:443, OPENAI_API_KEY).",
    ],
  },
  {
    name: "opencode",
    title: "opencode",
    run: `opencode run --model anthropic/claude-sonnet-4-5 "$(cat program.md)"`,
    allow: ["api.anthropic.com:443", "models.dev:443", "registry.npmjs.org:443"],
    env: ["ANTHROPIC_API_KEY"],
    notes: [
      "opencode run sends one message and exits. It reads its model list from models.dev and installs",
      "its default plugins from the npm registry each time it starts (its $HOME is empty every run).",
      "For another model, change --model and name its host and key.",
    ],
  },
];

/** The names `--agent` recognises as presets. */
export const AGENT_PRESET_NAMES: readonly string[] = AGENT_PRESETS.map((preset) => preset.name);

/** The preset called `name`, or undefined for anything else (which init writes as a raw command). */
export function agentPreset(name: string): AgentPreset | undefined {
  return AGENT_PRESETS.find((preset) => preset.name === name);
}
