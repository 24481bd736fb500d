import * as z from "zod";
import { Sha256 } from "./observation.js";

// The human step (docs/design.md §6.8) and the agent's context (§6.9), as the runner sends them with a
// proposal and `candidate_proposed` records them. An agent may only *ask* (a request file in its
// workspace); the answer is a person's, through the review route, with a token the agent never holds.

/** A path in the repository as a request names it: relative, without `..` or a leading `/`. */
const RepoPath = z
  .string()
  .min(1)
  .max(500)
  .refine((value) => !value.startsWith("/") && !value.split("/").includes("..") && !value.includes("\\") && !value.includes("\0"), {
    message: "must be a path inside the repository, without .. or a leading /",
  });

/** The most files one request may name. */
export const MAX_REQUEST_FILES = 100;

/**
 * What the agent writes to the file `LOOPWARDEN_REQUESTS` names: the protected files its candidate
 * changes, and why. Unknown keys are refused, so nothing else (an "approval") can be smuggled in.
 */
export const ReviewRequest = z.strictObject({
  files: z
    .array(RepoPath)
    .min(1, "names no file")
    .max(MAX_REQUEST_FILES)
    .refine((files) => new Set(files).size === files.length, "names a file twice"),
  why: z.string().trim().min(1, "says nothing").max(2_000),
});
export type ReviewRequest = z.infer<typeof ReviewRequest>;

/** `POST /v1/loops/:id/candidates/:candidateId/review`: a person's answer to a candidate's request (admin or review scope). */
export const ReviewDecisionRequest = z.strictObject({
  decision: z.enum(["ack", "reject"]),
  note: z.string().trim().min(1, "is empty: say why").max(2_000),
});
export type ReviewDecisionRequest = z.infer<typeof ReviewDecisionRequest>;

/** One file of the agent's context, pinned by the sha256 of the content it was given, and the tier that brought it in. */
export const ContextManifestFile = z.strictObject({
  path: z.string().min(1).max(500),
  sha256: Sha256,
  tier: z.enum(["stack_trace", "import_closure", "dependents"]),
});

/**
 * The context the runner built for the agent run that produced a candidate: `context.md`'s hash, the
 * files it names, the tokens it came to against the budget, and the tiers left out for the budget.
 */
export const ContextManifest = z.strictObject({
  context_sha256: Sha256,
  files: z.array(ContextManifestFile).max(2_000),
  tokens: z.number().int().min(0),
  budget: z.number().int().min(1),
  left_out: z.array(z.enum(["import_closure", "dependents"])).max(2),
});
export type ContextManifest = z.infer<typeof ContextManifest>;
