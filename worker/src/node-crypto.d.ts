// The part of workerd's `node:crypto` (nodejs_compat, wrangler.toml) the worker uses. Declared here
// rather than through @types/node, which would give the worker's code Node's globals, which workerd lacks.
declare module "node:crypto" {
  interface Hash {
    update(data: string | Uint8Array): Hash;
    digest(encoding: "hex"): string;
  }
  export function createHash(algorithm: "sha256"): Hash;
}
