// The parts of workerd's Node modules (nodejs_compat, wrangler.toml) the worker uses. Declared here
// rather than through @types/node, which would give the worker's code Node's globals, which workerd lacks.
declare module "node:crypto" {
  interface Hash {
    update(data: string | Uint8Array): Hash;
    digest(encoding: "hex"): string;
  }
  export function createHash(algorithm: "sha256"): Hash;
}

declare module "node:zlib" {
  /** Throws a RangeError when the output would exceed `maxOutputLength`. */
  export function gunzipSync(data: Uint8Array, options?: { maxOutputLength?: number }): Uint8Array;
}
