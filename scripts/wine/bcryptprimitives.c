/*
 * A stand-in for Windows' bcryptprimitives.dll under wine 8.0 (Debian 12),
 * which lacks it: Go 1.26 programs get their random bits from its
 * ProcessPrng (wine has it from 8.13 on). This one takes them from
 * RtlGenRandom (advapi32's SystemFunction036), which wine 8.0 has.
 * Built with Debian's gcc-mingw-w64-x86-64 by scripts/wine-test; for the
 * Windows tests only, never for guard.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buf, ULONG len);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
