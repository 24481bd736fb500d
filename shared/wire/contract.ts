import * as z from "zod";
import { MAX_TIMEOUT_MS, parseDuration } from "../duration.js";
import { HostPort } from "./confinement.js";

// The loop contract (`loop.yaml`, DESIGN §5). Every object is strict, so an unknown or misspelt key is
// an error naming its path, never silently ignored. Messages say how to fix the value; the runner
// prefixes them with the key path and the offending value.

/** A duration string such as `90s`, `10m` or `1h30m`. */
export const Duration = z.string().refine((text) => parseDuration(text) !== null, {
  message: "is not a duration; use a number with a unit, e.g. 90s, 10m, 1h30m",
});

/** A command's time limit: a duration a timer can hold (at most 24 days; longer ones would fire at once). */
export const Timeout = Duration.refine((text) => (parseDuration(text) ?? 0) <= MAX_TIMEOUT_MS, {
  message: `is longer than a time limit can be (${Math.floor(MAX_TIMEOUT_MS / 86_400_000)} days: a timer holds at most 2^31-1 ms); use a shorter timeout`,
});

/** A percentage such as `2%` or `0.5%`, as a string. */
export const Percent = z.string().regex(/^\d+(\.\d+)?%$/, "is not a percentage; write it like 2% or 0.5%");

/** The value of a percentage string (`"2%"` → 0.02). */
export function percentValue(text: string): number {
  return Number(text.slice(0, -1)) / 100;
}

const GateName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, "is not a gate name; use letters, digits, '.', '_' or '-' (at most 64)");

const MetricName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_.]{0,63}$/, "is not a metric name; use letters, digits, '_' or '.'");

/** A relative path inside the repository (no absolute paths, no `..`). */
const RepoPath = z
  .string()
  .min(1)
  .max(500)
  .refine((value) => !value.startsWith("/") && !value.split("/").includes(".."), {
    message: "must be a path inside the repository (relative, without ..)",
  });

/** Where a gate's test ids come from: a JUnit XML or a TAP file it writes, relative to the clone. */
export const TestReportSource = z.union([z.strictObject({ junit: RepoPath }), z.strictObject({ tap: RepoPath })], {
  error: "must be { junit: PATH } or { tap: PATH }",
});
export type TestReportSource = z.infer<typeof TestReportSource>;

/** A soft gate: it fails past a threshold on a metric its command prints (`METRIC name=value`), never by exit code alone. */
export const SoftThreshold = z
  .strictObject({ metric: MetricName, max: z.number().finite().optional(), min: z.number().finite().optional() })
  .refine((soft) => soft.max !== undefined || soft.min !== undefined, { message: "needs max or min" });
export type SoftThreshold = z.infer<typeof SoftThreshold>;

/** A shell command (run with /bin/sh -c). */
const Command = z.string().min(1, "is empty: put the command to run here").max(4_000);

/** A gate: one command whose outcome is observed, run in a clean clone of the candidate. */
export const Gate = z.strictObject({
  name: GateName,
  run: Command,
  timeout: Timeout.default("10m"),
  tests: TestReportSource.optional(),
  soft: SoftThreshold.optional(),
});
export type Gate = z.infer<typeof Gate>;

/** The modes of DESIGN §6.1. */
export const Mode = z.enum(["check_fixpoint", "optimize", "task_list"], {
  error: "is not a mode; use check_fixpoint, optimize or task_list",
});
export type Mode = z.infer<typeof Mode>;

const Direction = z.enum(["lower", "higher"], { error: "is not a direction; use lower or higher" });

/** The primary metric of an optimize loop (DESIGN §5, §6.3). */
export const MetricSpec = z.strictObject({
  run: z.string().min(1).max(4_000),
  name: MetricName,
  direction: Direction,
  min_effect: Percent.default("1%"),
  confidence: z.number().gt(0.5).lt(1).default(0.95),
  samples: z
    .strictObject({ min: z.number().int().min(2).max(1_000).default(5), max: z.number().int().min(2).max(10_000).default(40) })
    .refine((samples) => samples.min <= samples.max, { message: "min must not exceed max" })
    .default({ min: 5, max: 40 }),
  target: z.number().finite().optional(),
  timeout: Timeout.default("10m"),
});

/** A secondary metric: tracked as a guardrail, never optimised. */
export const SecondaryMetric = z.strictObject({ name: MetricName, direction: Direction, max_regression: Percent });

/** Guards, checked against t0 before any success (DESIGN §6.4). */
export const Guards = z.strictObject({
  protected: z.array(z.string().min(1).max(500)).max(1_000).optional(),
  tests_never_shrink: z.boolean().default(true),
  coverage: z
    .strictObject({
      lcov: RepoPath,
      floor: z.union([z.literal("t0"), Percent]).default("t0"),
      /**
       * Every line a candidate changes must be executed by some gate (read from the lcov report): a
       * candidate with changed lines no gate runs is rejected `check_inadequate`, listing them (DESIGN §6.4).
       * Optional without a default, so a contract that does not ask hashes as it did before.
       */
      changed_lines: z.boolean().optional(),
    })
    .optional(),
  on_violation: z.enum(["halt", "reject"], { error: "use halt or reject" }).default("halt"),
});

/**
 * One glob of the scope (DESIGN §6.4): a path pattern relative to the repository. A scope says what may
 * change, so it has no negations (protect a path inside the scope with `guards.protected`).
 */
const ScopeGlob = z
  .string()
  .min(1)
  .max(500)
  .refine((value) => !value.startsWith("/") && !value.startsWith("./") && !value.split("/").includes(".."), {
    message: "must be a glob relative to the repository's root (no leading / or ./, no ..), e.g. src/**",
  })
  .refine((value) => !value.startsWith("!"), {
    message: "is a negation; a scope lists what may change: protect paths inside it with guards.protected instead",
  })
  .refine((value) => !value.includes("\\"), { message: "uses \\; write paths with /" });

/** The scope: the only paths a candidate may add, change or delete (DESIGN §6.4). */
export const Scope = z.array(ScopeGlob).min(1, "is empty, so no change could ever be kept; list the paths the agent may change, e.g. [src/**]").max(200);

/** Stop conditions (DESIGN §5). */
export const StopConditions = z.strictObject({
  max_iterations: z.number().int().min(1).max(100_000).default(50),
  no_progress: z.number().int().min(1).max(100_000).default(10),
  budget: z.strictObject({ wall: Duration.optional(), cost_usd: z.number().positive().optional() }).optional(),
  /**
   * How long a candidate whose agent asked to change protected files waits for a person's answer
   * (`loopwarden ack` / `reject`) before the loop halts `human_required` (default 24h, DEFAULT_REVIEW_TIMEOUT).
   * Optional without a default, so a contract without it hashes as before.
   */
  review_timeout: Duration.optional(),
});

/** How long a review request waits without `stop.review_timeout`. */
export const DEFAULT_REVIEW_TIMEOUT = "24h";

/** The agent's context budget (tokens) without `agent.context.budget`. */
export const DEFAULT_CONTEXT_BUDGET = 32_000;

/** The most tokens a context budget may name. */
export const MAX_CONTEXT_BUDGET = 2_000_000;

/** An environment variable's name. */
const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "is not a variable name; use letters, digits and '_'");

/** A path mounted read-only into a zone: absolute, or `~/…` in the user's home directory. */
const MountPath = z
  .string()
  .min(2)
  .max(1_000)
  .refine((value) => (value.startsWith("/") || value.startsWith("~/")) && !value.split("/").includes(".."), {
    message: "must be an absolute path or ~/path, without ..",
  });

/**
 * The agent's network (DESIGN §6.7): `none` (the default), `{ allow: [host:port, …] }` — only those,
 * through the runner's auditing proxy — or `host`, which must be written out.
 */
export const AgentNetwork = z.union([z.enum(["none", "host"]), z.strictObject({ allow: z.array(HostPort).min(1).max(100) })], {
  error: "use none, host or { allow: [host:port, …] }",
});
export type AgentNetwork = z.infer<typeof AgentNetwork>;

/**
 * The agent command, its time limit, and its zone (DESIGN §6.7). Every zone field is optional without a
 * default, so a contract that names none hashes as it did before them.
 */
export const AgentSpec = z.strictObject({
  run: Command,
  timeout: Timeout.default("20m"),
  network: AgentNetwork.optional(),
  /** The names of the runner's variables the agent gets (e.g. ANTHROPIC_API_KEY); it gets no others. */
  env: z.array(EnvName).max(100).optional(),
  /** Paths the agent may read (a model CLI's configuration, a toolchain), mounted read-only. */
  mounts: z.array(MountPath).max(50).optional(),
  /**
   * A credential minted for each agent run and revoked after it, even when the run fails: `mint` prints
   * it on stdout, the agent gets it as `env`, and `revoke` gets it as `env` too.
   */
  credentials: z.strictObject({ env: EnvName, mint: Command, revoke: Command }).optional(),
  /**
   * What the runner tells the agent before each run (docs/agent.md): `budget` is the ceiling in tokens of
   * the context it builds (DEFAULT_CONTEXT_BUDGET without one). A budget the first tier does not fit in
   * halts the loop `context_budget_unsatisfiable` before the agent runs.
   */
  context: z.strictObject({ budget: z.number().int().min(1).max(MAX_CONTEXT_BUDGET) }).optional(),
});

/**
 * A task of a task_list loop: done only when its own check passes. A task without a check is accepted
 * here, and the loop halts `check_inadequate` at its creation, naming it (DESIGN §5): nothing could ever
 * say it is done, and the receipt records why the loop stopped.
 */
export const Task = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, "is not a task id; use letters, digits, '.', '_' or '-'"),
  title: z.string().min(1).max(500),
  check: z
    .string({ error: "is not a command; give the task's own check as a string" })
    .min(1, "is empty: put the task's own check command here")
    .max(4_000)
    .optional(),
});

/** The flake rate the in-loop monitor holds the check to when the contract names none (DESIGN §6.5). */
export const DEFAULT_MAX_FLAKE_RATE = "1%";

/** A fraction of runs, as a percentage below 100% (a flake rate). */
const FlakeRate = Percent.refine((text) => percentValue(text) > 0 && percentValue(text) < 1, { message: "must be above 0% and below 100%" });

/**
 * The check's determinism (DESIGN §6.5): the flake rate it is held to in the loop, and how often the
 * best-so-far is re-run to keep measuring it. Every field optional without a default, so a contract that
 * names none hashes as it did before.
 */
export const DeterminismSpec = z.strictObject({
  /** The loop halts `check_flaky` once its runs show the check flakier than this (default 1%). */
  max_flake_rate: FlakeRate.optional(),
  /**
   * Re-run the best-so-far's gates before every N-th iteration's agent run, a free sample of the check's
   * stability; `off` never. Default: every 5 iterations when t0's gates took at most a minute, else off.
   */
  recheck_every: z.union([z.number().int().min(1).max(100_000), z.literal("off")], { error: "use a whole number of iterations, or off" }).optional(),
});
export type DeterminismSpec = z.infer<typeof DeterminismSpec>;

/**
 * The precondition a new loop's check must pass before its first agent run (DESIGN §6.5): `runs` runs of
 * the gates in fresh clones, t0's among them (or as many as bound the flake rate by `max_flake_rate`,
 * ⌈3/R⌉), one re-run in the same clone, and, with `mutate`, the gates on a mutated tree, which must turn red.
 */
export const DoctorSpec = z
  .strictObject({
    /** A command that breaks the code, run in a fresh clone of t0: the gates must fail on what it leaves (and `doctor` runs it when --mutate is not given). */
    mutate: Command.optional(),
    runs: z.number().int().min(1).max(1_000).optional(),
    max_flake_rate: FlakeRate.refine((text) => percentValue(text) >= 0.003, {
      message: "must be at least 0.3%: it asks for ⌈3/R⌉ runs, and the precondition makes at most 1,000",
    }).optional(),
  })
  .refine((doctor) => doctor.runs === undefined || doctor.max_flake_rate === undefined, { message: "give either runs or max_flake_rate, not both" });
export type DoctorSpec = z.infer<typeof DoctorSpec>;

/** The most labels a contract may require or a runner offer: enough to name a machine, few enough to read. */
export const MAX_LABELS = 20;

const LabelPart = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Runner labels (DESIGN §11), key to value: `{ gpu: h100, os: linux }`. zod drops a `__proto__` key
 * from a record without a word, so it is refused before parsing: a required label must never vanish.
 */
export const Labels = z.preprocess(
  (labels: Record<string, string>, ctx) => {
    if (typeof labels === "object" && labels !== null && Object.hasOwn(labels, "__proto__")) {
      ctx.addIssue({ code: "custom", path: ["__proto__"], message: "is not a label key; use another name", input: labels });
    }
    return labels;
  },
  z
    .record(z.string().regex(LabelPart), z.string().regex(LabelPart, "is not a label value; use 1-64 letters, digits, '.', '_' or '-'"), {
      error: (issue) => (issue.code === "invalid_key" ? "is not a label key; use 1-64 letters, digits, '.', '_' or '-'" : undefined),
    })
    .refine((labels) => Object.keys(labels).length <= MAX_LABELS, { message: `has more than ${MAX_LABELS} labels` }),
);
export type Labels = z.infer<typeof Labels>;

/** Who may evaluate this loop's candidates: runners whose labels include every one of `labels`, with the same value. */
export const EvaluateSpec = z.strictObject({ labels: Labels });

/** The loop contract (DESIGN §5). */
export const Contract = z
  .strictObject({
    name: z.string().min(1).max(100),
    mode: Mode,
    objective: z.string().max(4_000).optional(),
    gates: z.array(Gate).min(1, "needs at least one gate").max(32),
    metric: MetricSpec.optional(),
    secondary: z.array(SecondaryMetric).max(32).optional(),
    // Optional without a default: a contract without a scope hashes as it did before scopes.
    scope: Scope.optional(),
    guards: Guards.optional(),
    stop: StopConditions.default({ max_iterations: 50, no_progress: 10 }),
    agent: AgentSpec,
    artifacts: z.array(z.string().min(1).max(500)).max(100).optional(),
    // The exec zone: the gates' network (the host's when absent) and a setup step run with network first.
    exec: z
      .strictObject({
        network: z.enum(["none", "host"], { error: "use none or host" }).optional(),
        /** Paths the gates may read though the exec zone hides them (a package or data set outside the repository). */
        mounts: z.array(MountPath).max(50).optional(),
        /** Run in each evaluation's clone before the gates, with the host's network (e.g. `npm ci`). */
        setup: Command.optional(),
        setup_timeout: Timeout.optional(),
      })
      .optional(),
    /** `confined` (the default): both zones walled off, or no run at all. `none` runs them as the user, and says so. */
    isolation: z.enum(["confined", "none"], { error: "use confined or none" }).optional(),
    tasks: z.array(Task).min(1).max(1_000).optional(),
    // Optional without a default, as every key added after the first contracts: their hash stays as it was.
    determinism: DeterminismSpec.optional(),
    doctor: DoctorSpec.optional(),
    // Optional without a default: a contract that does not ask for labels hashes as it did before them.
    evaluate: EvaluateSpec.optional(),
  })
  .superRefine((contract, ctx) => {
    const seen = new Set<string>();
    contract.gates.forEach((gate, index) => {
      if (seen.has(gate.name)) {
        ctx.addIssue({ code: "custom", path: ["gates", index, "name"], message: `duplicate gate name "${gate.name}"` });
      }
      seen.add(gate.name);
    });
    if (contract.mode === "optimize" && !contract.metric) {
      ctx.addIssue({ code: "custom", path: ["metric"], message: "is required in optimize mode" });
    }
    if (contract.mode === "task_list" && !contract.tasks) {
      ctx.addIssue({ code: "custom", path: ["tasks"], message: "is required in task_list mode: the tasks, each with its own check" });
    }
    if (contract.mode !== "task_list" && contract.tasks) {
      ctx.addIssue({ code: "custom", path: ["tasks"], message: "is only used in task_list mode" });
    }
  });
export type Contract = z.infer<typeof Contract>;
export type ContractInput = z.input<typeof Contract>;
