/**
 * How the cache's own upstream requests fail: a code, and the HTTP status the proxy answers with
 * (RFC 9110 §15.6.5 and §15.6.3: the gateway's statuses; 503 when tm-cache declines to ask).
 */

/** `bad-answer`: the upstream answered, but not as the API does (not JSON where JSON is due); `too-large`: above upstream.maxBodyBytes. */
export type UpstreamErrorCode = 'timeout' | 'connect' | 'reset' | 'bad-answer' | 'queue-full' | 'closed' | 'too-large';

export class UpstreamError extends Error {
  readonly code: UpstreamErrorCode;
  readonly status: 502 | 503 | 504;

  constructor(code: UpstreamErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'UpstreamError';
    this.code = code;
    this.status = code === 'timeout' ? 504 : code === 'queue-full' ? 503 : 502;
  }
}
