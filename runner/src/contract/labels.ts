import { Labels } from "#shared/wire/contract.js";
import { UserError } from "../errors.js";

/**
 * The labels of `--labels gpu=h100,os=linux`: what this runner offers, matched against a contract's
 * `evaluate.labels` (DESIGN §11). Refused by name when malformed; a key given twice is a mistake.
 */
export function parseLabels(text: string | undefined): Labels {
  if (text === undefined || text.trim() === "") return {};
  const labels: Record<string, string> = {};
  for (const pair of text.split(",")) {
    const match = /^\s*([^=\s]+)\s*=\s*([^=\s]+)\s*$/.exec(pair);
    if (!match?.[1] || !match[2]) throw new UserError(`--labels takes key=value pairs separated by commas (gpu=h100,os=linux); not "${pair}"`, 2);
    if (Object.hasOwn(labels, match[1])) throw new UserError(`--labels names ${match[1]} twice`, 2);
    labels[match[1]] = match[2];
  }
  const parsed = Labels.safeParse(labels);
  if (!parsed.success) throw new UserError(`--labels: ${parsed.error.issues.map((issue) => `${issue.path.join(".")} ${issue.message}`).join("; ")}`, 2);
  return parsed.data;
}
