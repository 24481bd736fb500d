import { z } from "zod";
import { parseDuration } from "../duration.js";

/** A duration string such as `90s`, `10m` or `1h30m`. */
export const Duration = z
  .string()
  .refine((text) => parseDuration(text) !== null, {
    message: "is not a duration; use a number with a unit, e.g. 90s, 10m, 2h",
  });

/** A gate: one command whose exit code is observed, run in a clean clone of the candidate. */
export const Gate = z.strictObject({
  name: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, "use letters, digits, '.', '_' or '-' (at most 64)"),
  run: z.string().min(1).max(4_000),
  timeout: Duration.default("10m"),
});
export type Gate = z.infer<typeof Gate>;

/** The modes of DESIGN §6.1. */
export const Mode = z.enum(["check_fixpoint", "optimize", "task_list"]);
export type Mode = z.infer<typeof Mode>;

/** Stop conditions (DESIGN §5); defaults from DESIGN §5's flag-only quick start. */
export const StopConditions = z.strictObject({
  max_iterations: z.number().int().min(1).max(100_000).default(50),
  no_progress: z.number().int().min(1).max(100_000).default(10),
});

/** The agent command and its time limit. */
export const AgentSpec = z.strictObject({
  run: z.string().min(1).max(4_000),
  timeout: Duration.default("20m"),
});

/**
 * The loop contract (DESIGN §5), the subset this version implements. Unknown keys are errors, so a
 * contract written for a later version is refused rather than half-obeyed.
 */
export const Contract = z
  .strictObject({
    name: z.string().min(1).max(100),
    mode: Mode,
    objective: z.string().max(4_000).optional(),
    gates: z.array(Gate).min(1).max(32),
    stop: StopConditions.default({ max_iterations: 50, no_progress: 10 }),
    agent: AgentSpec,
  })
  .superRefine((contract, ctx) => {
    const seen = new Set<string>();
    contract.gates.forEach((gate, index) => {
      if (seen.has(gate.name)) {
        ctx.addIssue({ code: "custom", path: ["gates", index, "name"], message: `duplicate gate name "${gate.name}"` });
      }
      seen.add(gate.name);
    });
  });
export type Contract = z.infer<typeof Contract>;
export type ContractInput = z.input<typeof Contract>;
