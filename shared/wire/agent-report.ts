import * as z from "zod";
import { Sha256 } from "./observation.js";

// What an agent may say about its own run (DESIGN §9: a receipt pins which model, with which context
// and at what cost, produced each change). Written by the agent to the file named by
// LOOPWARDEN_AGENT_REPORT; every field is optional, nothing in it is trusted for a decision except the
// cost, which only ever stops a loop (stop.budget.cost_usd), never keeps a change.

/** The report file an agent writes, as the runner validates it. Unknown keys are refused. */
export const AgentReportFile = z.strictObject({
  agent: z
    .strictObject({
      provider: z.string().max(100).optional(),
      model: z.string().max(200).optional(),
      version: z.string().max(100).optional(),
    })
    .optional(),
  sampling: z.record(z.string().max(64), z.union([z.number(), z.string().max(200), z.boolean()])).optional(),
  cost: z
    .strictObject({
      usd: z.number().finite().min(0).optional(),
      input_tokens: z.number().int().min(0).optional(),
      output_tokens: z.number().int().min(0).optional(),
    })
    .optional(),
  context_files: z.array(z.string().min(1).max(500)).max(1_000).optional(),
  description: z.string().max(500).optional(),
});
export type AgentReportFile = z.infer<typeof AgentReportFile>;

/** A context file the agent said it read, pinned by the runner to the content it had (null: not found). */
export const ContextFile = z.strictObject({ path: z.string().max(500), sha256: Sha256.nullable() });

/** The agent report as recorded with a candidate: the file's fields, context files pinned by hash. */
export const AgentReport = z.strictObject({
  agent: AgentReportFile.shape.agent,
  sampling: AgentReportFile.shape.sampling,
  cost: AgentReportFile.shape.cost,
  context_files: z.array(ContextFile).max(1_000).optional(),
  description: AgentReportFile.shape.description,
});
export type AgentReport = z.infer<typeof AgentReport>;
