/**
 * What the scorers read of a reply: `content` only, never the reasoning. A server should already keep
 * reasoning out of `content` (DESIGN §5); if some leaked (Qwen's template opens `<think>` in the prompt,
 * so a server that forgets to split sends `reasoning</think>answer`), everything up to the last
 * `</think>` is dropped, and an unclosed `<think>` drops everything after it.
 */
export function answerText(content: string | null | undefined): string {
  if (content === null || content === undefined) return '';
  let text = content;
  const close = text.lastIndexOf('</think>');
  if (close >= 0) text = text.slice(close + '</think>'.length);
  const open = text.indexOf('<think>');
  if (open >= 0) text = text.slice(0, open);
  return text;
}
