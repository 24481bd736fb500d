import { afterEach, describe, expect, it, vi } from "vitest";
import { PartsRefused, UploadGone } from "../../worker/src/artifacts/artifact-storage.js";
import { s3Storage } from "../../worker/src/artifacts/artifact-storage-s3.js";
import { S3Failure, refusalIn, uploadIdOf } from "../../worker/src/artifacts/s3-answers.js";

// S3 mode's own requests (DESIGN §10), in workerd, against answers a stub of storage gives: what each
// call sends (signed, path-style, the SDK's requests one by one) and what it makes of S3's answers, the
// XML ones included. The same calls against a real S3 server (s3rver behind a SigV4-checking gate) are
// test/e2e/artifacts-s3.test.ts.

const SETTINGS = {
  endpoint: "http://127.0.0.1:9",
  bucket: "artifacts",
  region: "auto",
  accessKeyId: "key-id",
  secretAccessKey: "secret",
  presignTtlSeconds: 120,
};
const KEY = "loops/l1/sha256/ab12";
const XML = '<?xml version="1.0" encoding="UTF-8"?>\n';

const errorXml = (code: string, message = "refused") => `${XML}<Error><Code>${code}</Code><Message>${message}</Message><RequestId>r1</RequestId></Error>`;

interface Sent {
  method: string;
  url: URL;
  headers: Headers;
  body: string;
}

/** Storage answering each request with the next of `answers`; answers what was sent. */
function stubStorage(...answers: (() => Response)[]): Sent[] {
  const sent: Sent[] = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const request = new Request(input, init);
    sent.push({ method: request.method, url: new URL(request.url), headers: request.headers, body: await request.text() });
    const answer = answers.shift();
    if (!answer) throw new Error(`no answer stubbed for ${request.method} ${request.url}`);
    return answer();
  });
  return sent;
}

const xmlAnswer = (status: number, text: string) => () => new Response(text, { status, headers: { "content-type": "application/xml" } });
const stored = () =>
  new Response(null, {
    status: 200,
    headers: { etag: '"e-1"', "content-length": "12", "content-type": "text/plain", "x-amz-meta-name": "a.log", "x-amz-meta-size": "12" },
  });

afterEach(() => vi.restoreAllMocks());

describe("S3's XML answers", () => {
  it("reads an <Error>'s code and message, and nothing else as a refusal", () => {
    const refusal = refusalIn(`${XML}  \n${errorXml("InvalidPart", "One or more of the specified parts could not be found.")}`, 200, "POST k");
    expect(refusal).toBeInstanceOf(S3Failure);
    expect([refusal?.name, refusal?.message, refusal?.status]).toEqual(["InvalidPart", "One or more of the specified parts could not be found.", 200]);
    expect(refusalIn(`${XML}<CompleteMultipartUploadResult><ETag>"x-2"</ETag></CompleteMultipartUploadResult>`, 200, "POST k")).toBeNull();
    expect(refusalIn("", 500, "GET k")).toBeNull();
    expect(refusalIn("<html><body>bad gateway</body></html>", 502, "GET k")).toBeNull();
    expect(refusalIn(`${XML}<Error><Code></Code></Error>`, 400, "GET k")).toBeNull();
  });

  it("reads CreateMultipartUpload's upload id (entities decoded), and refuses an answer without one", () => {
    const answer = `${XML}<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><Key>k</Key><UploadId>u-1&amp;2</UploadId></InitiateMultipartUploadResult>`;
    expect(uploadIdOf(answer, "k")).toBe("u-1&2");
    expect(() => uploadIdOf(`${XML}<InitiateMultipartUploadResult><Key>k</Key></InitiateMultipartUploadResult>`, "k")).toThrow(/without an upload id/);
    expect(() => uploadIdOf("not xml", "k")).toThrow(/without an upload id/);
  });
});

describe("S3 mode's requests", () => {
  it("begins a multipart upload with its metadata, signed, and presigns each part's URL binding its length", async () => {
    const sent = stubStorage(xmlAnswer(200, `${XML}<InitiateMultipartUploadResult><UploadId>up-1</UploadId></InitiateMultipartUploadResult>`));
    const begun = await s3Storage(SETTINGS).beginMultipart(
      { key: KEY, path: "/p", sha256: "ab12", size: 12, contentType: "text/plain", recordedContentType: "text/plain", name: "a.log" },
      5,
    );
    expect(sent).toHaveLength(1);
    const [create] = sent;
    expect([create?.method, create?.url.toString()]).toEqual(["POST", `http://127.0.0.1:9/artifacts/${KEY}?uploads=`]);
    expect(Object.fromEntries([...(create?.headers ?? [])].filter(([name]) => name.startsWith("x-amz-meta-")))).toEqual({
      "x-amz-meta-name": "a.log",
      "x-amz-meta-size": "12",
      "x-amz-meta-sha256": "ab12",
    });
    expect(create?.headers.get("authorization")).toMatch(
      /^AWS4-HMAC-SHA256 Credential=key-id\/\d{8}\/auto\/s3\/aws4_request, SignedHeaders=[^,]*x-amz-meta-sha256/,
    );
    expect(begun.uploadId).toBe("up-1");
    expect(begun.partUrls).toHaveLength(3);
    const urls = begun.partUrls.map((url) => new URL(url));
    expect(urls.map((url) => [url.pathname, url.searchParams.get("partNumber"), url.searchParams.get("uploadId")])).toEqual([
      [`/artifacts/${KEY}`, "1", "up-1"],
      [`/artifacts/${KEY}`, "2", "up-1"],
      [`/artifacts/${KEY}`, "3", "up-1"],
    ]);
    for (const url of urls) {
      expect(url.searchParams.get("X-Amz-SignedHeaders")).toBe("content-length;host");
      expect(url.searchParams.get("X-Amz-Expires")).toBe("120");
      expect(url.searchParams.get("X-Amz-Signature")).toMatch(/^[0-9a-f]{64}$/);
    }
    // Parts of 5, 5 and 2 bytes: each URL signs its own length, so they differ by more than the part number.
    expect(new Set(begun.partUrls.map((url) => new URL(url).searchParams.get("X-Amz-Signature"))).size).toBe(3);
  });

  it("completes with the parts listed in XML, then describes the object as a HEAD answers it", async () => {
    const sent = stubStorage(xmlAnswer(200, `${XML}<CompleteMultipartUploadResult><ETag>"e-1"</ETag></CompleteMultipartUploadResult>`), stored);
    const object = await s3Storage(SETTINGS).completeMultipart(KEY, "up-1", [
      { partNumber: 1, etag: '"p1"' },
      { partNumber: 2, etag: '"p2"' },
    ]);
    expect(sent.map((request) => `${request.method} ${request.url.pathname}${request.url.search}`)).toEqual([
      `POST /artifacts/${KEY}?uploadId=up-1`,
      `HEAD /artifacts/${KEY}`,
    ]);
    expect(sent[0]?.body).toBe(
      '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>&quot;p1&quot;</ETag><PartNumber>1</PartNumber></Part><Part><ETag>&quot;p2&quot;</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>',
    );
    expect(object).toEqual({ size: 12, etag: "e-1", httpEtag: '"e-1"', name: "a.log", contentType: "text/plain", declaredSize: 12 });
  });

  it("refuses a complete that storage answered 200 with an <Error> in the body: parts refused, an upload gone, or a failure", async () => {
    const parts = [{ partNumber: 1, etag: '"p1"' }];
    stubStorage(xmlAnswer(200, errorXml("InvalidPart", "One or more of the specified parts could not be found.")));
    await expect(s3Storage(SETTINGS).completeMultipart(KEY, "up-1", parts)).rejects.toThrow(PartsRefused);

    vi.restoreAllMocks();
    stubStorage(xmlAnswer(200, errorXml("NoSuchUpload")));
    await expect(s3Storage(SETTINGS).completeMultipart(KEY, "up-1", parts)).rejects.toThrow(UploadGone);

    // An internal error after the 200: neither a refusal of the parts nor a success, and nothing is looked up.
    vi.restoreAllMocks();
    const sent = stubStorage(xmlAnswer(200, errorXml("InternalError", "We encountered an internal error. Please try again.")));
    const failure = await s3Storage(SETTINGS)
      .completeMultipart(KEY, "up-1", parts)
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(S3Failure);
    expect(failure).not.toBeInstanceOf(PartsRefused);
    expect((failure as S3Failure).name).toBe("InternalError");
    expect(sent).toHaveLength(1);
  });

  it("answers a complete or an abort of an upload storage does not have (404 NoSuchUpload) with UploadGone", async () => {
    stubStorage(xmlAnswer(404, errorXml("NoSuchUpload")), xmlAnswer(404, errorXml("NoSuchUpload")));
    const storage = s3Storage(SETTINGS);
    await expect(storage.completeMultipart(KEY, "up-1", [{ partNumber: 1, etag: '"p1"' }])).rejects.toThrow(UploadGone);
    await expect(storage.abortMultipart(KEY, "up-1")).rejects.toThrow(UploadGone);
  });

  it("answers a missing object as null, but a missing bucket or a refusal as a failure", async () => {
    const storage = s3Storage(SETTINGS);
    stubStorage(
      () => new Response(null, { status: 404 }),
      xmlAnswer(404, errorXml("NoSuchKey")),
      xmlAnswer(404, errorXml("NoSuchBucket", "The specified bucket does not exist")),
      xmlAnswer(403, errorXml("AccessDenied", "Access Denied")),
    );
    expect(await storage.head(KEY)).toBeNull();
    expect(await storage.get(KEY)).toBeNull();
    await expect(storage.get(KEY)).rejects.toThrow("The specified bucket does not exist");
    await expect(storage.head(KEY)).rejects.toMatchObject({ name: "AccessDenied", status: 403 });
  });

  it("streams an object's bytes with its description", async () => {
    stubStorage(() => new Response("hello, world", { status: 200, headers: { etag: '"e-1"', "content-length": "12", "x-amz-meta-name": "a.log" } }));
    const object = await s3Storage(SETTINGS).get(KEY);
    expect(object).toMatchObject({ size: 12, etag: "e-1", name: "a.log", declaredSize: undefined });
    expect(await new Response(object?.body).text()).toBe("hello, world");
  });

  it("tries a request storage answered 5xx up to 3 times, as the SDK did, and then fails", async () => {
    const sent = stubStorage(xmlAnswer(503, errorXml("SlowDown")), stored);
    expect(await s3Storage(SETTINGS).head(KEY)).toMatchObject({ etag: "e-1" });
    expect(sent).toHaveLength(2);

    vi.restoreAllMocks();
    const again = stubStorage(...Array.from({ length: 3 }, () => xmlAnswer(500, errorXml("InternalError"))));
    await expect(s3Storage(SETTINGS).delete(KEY)).rejects.toMatchObject({ name: "InternalError", status: 500 });
    expect(again).toHaveLength(3);
  });

  it("tries a request that failed on the network up to 3 times, as the SDK did, and then fails with that error", async () => {
    const lost = () => {
      throw new TypeError("Network connection lost.");
    };
    const sent = stubStorage(lost, stored);
    expect(await s3Storage(SETTINGS).head(KEY)).toMatchObject({ etag: "e-1" });
    expect(sent).toHaveLength(2);

    vi.restoreAllMocks();
    const again = stubStorage(lost, lost, lost);
    await expect(s3Storage(SETTINGS).delete(KEY)).rejects.toThrow("Network connection lost.");
    expect(again).toHaveLength(3);
  });
});
