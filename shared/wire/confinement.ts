import * as z from "zod";

// How the two zones were confined (DESIGN §6.7): the runner records, for every agent run, how
// the agent was walled off and which hosts it reached through the allowlisting proxy, and for every
// evaluation, how its gates were. Both travel in the public event log, so a receipt attests them and a
// verifier re-derives what the receipt says of them.

/** `host:port`, a host name or IPv4 address and a port; a leading `*.` allows every subdomain. */
export const HostPort = z
  .string()
  .max(260)
  .regex(/^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?:\d{1,5}$/, "is not host:port; write it like api.anthropic.com:443 or 127.0.0.1:8080")
  .refine((value) => {
    const port = Number(value.slice(value.lastIndexOf(":") + 1));
    return port >= 1 && port <= 65_535;
  }, "has a port outside 1-65535");
export type HostPort = z.infer<typeof HostPort>;

/** What walled a zone off: bubblewrap's namespaces, or nothing (`isolation: none`, said plainly wherever it shows). */
export const ZoneMechanism = z.enum(["bwrap", "none"]);
export type ZoneMechanism = z.infer<typeof ZoneMechanism>;

const Count = z.number().int().min(0);

/** One host an agent run asked the proxy for: whether the allowlist let it through, and the bytes each way. */
export const HostContact = z.strictObject({
  host: z.string().min(1).max(255),
  port: z.number().int().min(1).max(65_535),
  allowed: z.boolean(),
  requests: Count,
  bytes_out: Count,
  bytes_in: Count,
});
export type HostContact = z.infer<typeof HostContact>;

/** The most hosts recorded per agent run; beyond it the run's audit says how many more were asked for. */
export const MAX_HOST_CONTACTS = 100;

/** How one agent run was confined (the agent zone). */
export const AgentConfinement = z.strictObject({
  mechanism: ZoneMechanism,
  /** `none` (no network), `host` (the host's, written explicitly), or `allow` (only `allow`, through the proxy). */
  network: z.enum(["none", "host", "allow"]),
  allow: z.array(HostPort).max(100).optional(),
  /** Paths mounted read-only into the zone beyond the base view (`agent.mounts`, toolchains on PATH). */
  mounts: z.array(z.string().min(1).max(1_000)).max(100).optional(),
  /** The hosts asked for through the proxy in this run (network `allow` only). */
  hosts: z.array(HostContact).max(MAX_HOST_CONTACTS).optional(),
  /** Hosts asked for beyond `MAX_HOST_CONTACTS`, not itemised. */
  hosts_omitted: Count.optional(),
  /** Whether a per-run credential was minted for this run (and revoked after it). */
  credential: z.boolean().optional(),
});
export type AgentConfinement = z.infer<typeof AgentConfinement>;

/** How the commands of one evaluation (gates, metric, task checks) were confined (the exec zone). */
export const ExecConfinement = z.strictObject({
  mechanism: ZoneMechanism,
  network: z.enum(["none", "host"]),
});
export type ExecConfinement = z.infer<typeof ExecConfinement>;
