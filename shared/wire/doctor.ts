import * as z from "zod";
import { testIdList } from "./observation.js";

// What the precondition measured before a loop's first agent run (DESIGN §6.5): the runner's readings of
// its check at t0 — never a verdict. The engine reads them at creation (`doctorHalt`) and decides whether
// the loop may start; `loopwarden verify` decides again from the same record in the loop's first event.

/** The most test ids one list of the record names; the count beside it says how many there were. */
export const MAX_DOCTOR_IDS = 100;

const Ids = testIdList(MAX_DOCTOR_IDS);

/** A git tree id (SHA-1 or SHA-256 object format): what the precondition ran on, whatever the commit. */
export const GitTree = z.string().regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/, "must be a full git tree id");

/** One fresh-clone run whose outcomes differed from t0's: which ids, and how many in all. */
export const DoctorDeviation = z.strictObject({ run: z.number().int().min(2), tests: Ids, count: z.number().int().min(1) });

/** The mutation canary (`doctor.mutate`): the command, what it changed, and what it turned red of what passed at t0. */
export const DoctorMutation = z.strictObject({
  command: z.string().min(1).max(4_000),
  changed_paths: z.number().int().min(1),
  /** Ids (gates included) that passed at t0. */
  passing_at_t0: z.number().int().min(0),
  /** Of those, the ids that did not pass on the mutated tree. */
  turned_red: Ids,
  red_count: z.number().int().min(0),
});
export type DoctorMutation = z.infer<typeof DoctorMutation>;

/**
 * The precondition's record, in the creation request and `loop_created.data.doctor`: `skipped` when the
 * loop's creator said `--skip-doctor` (the receipt says so), else what it measured. `runs` counts the
 * runs in fresh clones, t0's own among them (run 1): each later run is compared with t0's.
 */
export const DoctorRecord = z.discriminatedUnion("status", [
  z.strictObject({ status: z.literal("skipped") }),
  z.strictObject({
    status: z.literal("measured"),
    /** The tree of t0's commit: a result is reused for the same contract and tree. */
    tree: GitTree,
    runs: z.number().int().min(1).max(1_000),
    deviations: z.array(DoctorDeviation).max(1_000),
    /** What a second run of the gates in the same clone changed (side effects). */
    rerun: z.strictObject({ changed: Ids, count: z.number().int().min(0) }),
    mutation: DoctorMutation.optional(),
    /** How long the precondition took beyond t0's own run. */
    duration_ms: z.number().min(0),
    /** When the record was measured, if it was reused from an earlier creation for the same contract and tree. */
    cached_from: z.iso.datetime().optional(),
  }),
]);
export type DoctorRecord = z.infer<typeof DoctorRecord>;
