import { readFile } from "node:fs/promises";
import type { z } from "zod";

/**
 * A state file's contents parsed by `schema`, or null when it is missing, not JSON, or not what the
 * schema says: a record the runner wrote and finds damaged is measured or made again, never trusted.
 */
export async function readJsonFile<T extends z.ZodType>(file: string, schema: T): Promise<z.infer<T> | null> {
  const text = await readFile(file, "utf8").catch(() => null);
  if (text === null) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = schema.safeParse(json);
  return parsed.success ? parsed.data : null;
}
