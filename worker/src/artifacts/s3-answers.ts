import { isElementNode, parse, simplify } from "txml/txml";
import * as z from "zod";

// S3's XML answers, as S3 mode's storage reads them (DESIGN §10): the upload id CreateMultipartUpload
// answers, and the <Error> of a refusal, validated with zod at this edge.
//
// The parser is txml's core (`txml/txml`, no dependencies): 4.6 KB of the bundle minified, where
// fast-xml-parser 5.12.1 (the runner's JUnit parser) is 64.6 KB and @xmldom/xmldom 0.9.12 (the SDK's
// DOMParser until issue 30) 93.7 KB, each measured as esbuild bundles it minified for the worker. These
// answers are small documents of known shape, read only for a few text elements: a lenient DOM parser
// is enough, and zod refuses whatever does not have the shape.

/** A request storage refused: `name` is S3's error code (NoSuchKey, NoSuchUpload, …), `status` its HTTP status. */
export class S3Failure extends Error {
  constructor(
    readonly status: number,
    code: string,
    message: string,
  ) {
    super(message);
    this.name = code;
  }
}

const ErrorDocument = z.object({ Error: z.object({ Code: z.string().min(1), Message: z.string().optional() }) });
const InitiateDocument = z.object({ InitiateMultipartUploadResult: z.object({ UploadId: z.string().min(1) }) });

/** The document's root element simplified to nested objects (text elements as strings); null when it is no XML. */
function documentOf(text: string): unknown {
  try {
    const roots = parse(text, { decodeEntities: true }).filter(isElementNode);
    const elements = roots.filter((node) => !node.tagName.startsWith("?") && !node.tagName.startsWith("!"));
    return elements.length === 1 ? simplify(elements) : null;
  } catch {
    return null;
  }
}

/** The <Error> in an answer's body, as an S3Failure; null when the body is not one. */
export function refusalIn(text: string, status: number, what: string): S3Failure | null {
  const document = ErrorDocument.safeParse(documentOf(text));
  if (!document.success) return null;
  const { Code, Message } = document.data.Error;
  return new S3Failure(status, Code, Message?.trim() ? Message.trim() : `storage refused ${what} (${Code})`);
}

/**
 * The failure a refused answer (not 2xx) stands for: its <Error>'s code and message, or, without one (a
 * HEAD has no body), a code after its status as the SDK names it (NotFound for a 404).
 */
export async function errorOfAnswer(response: Response, what: string): Promise<S3Failure> {
  const text = await response.text().catch(() => "");
  return (
    refusalIn(text, response.status, what) ??
    new S3Failure(response.status, response.status === 404 ? "NotFound" : `Http${response.status}`, `storage answered ${response.status} to ${what}`)
  );
}

/** The upload id in CreateMultipartUpload's answer; an answer without one is a failure of storage. */
export function uploadIdOf(text: string, key: string): string {
  const document = InitiateDocument.safeParse(documentOf(text));
  if (!document.success) throw new Error(`storage began a multipart upload of ${key} without an upload id`);
  return document.data.InitiateMultipartUploadResult.UploadId;
}
