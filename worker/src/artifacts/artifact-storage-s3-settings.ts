// Apart from artifact-storage-mode.ts, which reads them from the environment, and artifact-storage-s3.ts,
// which uses them: the mode loads the S3 module lazily (import()), and a type import back from it made
// the two a cycle.

/** The S3 settings of a deployment in S3 mode. */
export interface S3Settings {
  endpoint: string;
  bucket: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** How long a presigned URL stays valid, in seconds. */
  presignTtlSeconds: number;
}
