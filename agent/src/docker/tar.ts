/**
 * A minimal in-memory tar (POSIX ustar) writer for the few small files the agent puts into a container
 * with `putArchive` (secret files). Only regular files; Docker creates missing parent directories
 * itself when it extracts (mode 0755, owned by root), and no directory entry is written so existing
 * directories (/tmp, /etc) keep their own modes.
 */

export interface TarFile {
  /** Path inside the archive, relative (no leading `/`), at most 255 bytes. */
  name: string;
  mode: number;
  content: Buffer;
  uid?: number;
  gid?: number;
  /** Unix seconds. */
  mtime?: number;
}

const BLOCK = 512;

/** Writes `value` as zero-padded octal into `width` bytes (width-1 digits and a NUL). */
function octal(header: Buffer, offset: number, width: number, value: number): void {
  const text = value.toString(8).padStart(width - 1, '0');
  if (text.length > width - 1) throw new Error(`tar: ${value} does not fit in ${width - 1} octal digits`);
  header.write(`${text}\0`, offset, width, 'ascii');
}

/** ustar splits a long name into prefix (155) and name (100) at a `/`. */
function splitName(name: string): { prefix: string; base: string } {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', base: name };
  for (let i = name.lastIndexOf('/'); i > 0; i = name.lastIndexOf('/', i - 1)) {
    const prefix = name.slice(0, i);
    const base = name.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(base) <= 100 && base.length > 0) {
      return { prefix, base };
    }
  }
  throw new Error(`tar: path too long for a ustar header: ${name.length} characters`);
}

function header(file: TarFile): Buffer {
  const block = Buffer.alloc(BLOCK, 0);
  const { prefix, base } = splitName(file.name);
  block.write(base, 0, 100, 'utf8');
  octal(block, 100, 8, file.mode & 0o7777);
  octal(block, 108, 8, file.uid ?? 0);
  octal(block, 116, 8, file.gid ?? 0);
  octal(block, 124, 12, file.content.length);
  octal(block, 136, 12, file.mtime ?? Math.floor(Date.now() / 1000));
  block.fill(0x20, 148, 156); // checksum field counts as spaces while summing
  block.write('0', 156, 1, 'ascii'); // regular file
  block.write('ustar\0', 257, 6, 'ascii');
  block.write('00', 263, 2, 'ascii');
  block.write('root', 265, 32, 'ascii');
  block.write('root', 297, 32, 'ascii');
  block.write(prefix, 345, 155, 'utf8');
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
  return block;
}

/** One archive holding the files, ending with the two zero blocks tar readers expect. */
export function buildTar(files: TarFile[]): Buffer {
  const parts: Buffer[] = [];
  for (const file of files) {
    if (file.name.startsWith('/') || file.name.split('/').some((s) => s === '..' || s === '')) {
      throw new Error(`tar: refusing path ${JSON.stringify(file.name)}`);
    }
    parts.push(header(file), file.content);
    const pad = (BLOCK - (file.content.length % BLOCK)) % BLOCK;
    if (pad > 0) parts.push(Buffer.alloc(pad, 0));
  }
  parts.push(Buffer.alloc(BLOCK * 2, 0));
  return Buffer.concat(parts);
}
