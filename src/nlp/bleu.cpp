// sacreBLEU-compatible and Model Garden BLEU; see include/garden/nlp/bleu.h.
//
// The tokenizers are Python regex substitutions (re.sub / regex.sub). Every pattern is
// either one character class or two adjacent classes, so each is emulated exactly by a
// left-to-right scan over code points that, like re.sub, resumes after a match.
//
// Unicode data: the tables below were generated from Python's unicodedata, so
// categories, str.isspace() (used by str.split/rstrip) and str.lower() agree with the
// Python these metrics come from (sacreBLEU's `regex` module may ship a newer Unicode
// version: characters assigned since Unicode 14.0 are treated as unassigned).
// Two documented simplifications:
//  * str.lower() maps Greek capital sigma to final sigma when a cased letter precedes
//    it and none follows; we look only at the adjacent code points instead of first
//    skipping "case-ignorable" ones (apostrophes, combining marks).
//  * invalid UTF-8 throws garden::Error (Python would fail to decode the file).
#include "garden/nlp/bleu.h"

#include "garden/base/encoding.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <unordered_map>

#include "garden/base/error.h"

namespace garden::nlp {

namespace {

struct CategoryRange {
  char32_t lo, hi;
  char category;  // 'P' punctuation, 'S' symbol, 'D' decimal digit (Nd), 'N' other number
};
struct LowerRun {
  char32_t lo, hi;
  int stride;  // 1: every code point in [lo, hi]; 2: every other one (Latin Extended pairs)
  int delta;   // lowercase = code point + delta
};
struct CodeRange {
  char32_t lo, hi;
};

// Generated from Python 3.11.7's unicodedata (Unicode 14.0.0).
constexpr CategoryRange kCategoryRanges[] = {
    {0x21, 0x23, 'P'},       {0x24, 0x24, 'S'},       {0x25, 0x2A, 'P'},
    {0x2B, 0x2B, 'S'},       {0x2C, 0x2F, 'P'},       {0x30, 0x39, 'D'},
    {0x3A, 0x3B, 'P'},       {0x3C, 0x3E, 'S'},       {0x3F, 0x40, 'P'},
    {0x5B, 0x5D, 'P'},       {0x5E, 0x5E, 'S'},       {0x5F, 0x5F, 'P'},
    {0x60, 0x60, 'S'},       {0x7B, 0x7B, 'P'},       {0x7C, 0x7C, 'S'},
    {0x7D, 0x7D, 'P'},       {0x7E, 0x7E, 'S'},       {0xA1, 0xA1, 'P'},
    {0xA2, 0xA6, 'S'},       {0xA7, 0xA7, 'P'},       {0xA8, 0xA9, 'S'},
    {0xAB, 0xAB, 'P'},       {0xAC, 0xAC, 'S'},       {0xAE, 0xB1, 'S'},
    {0xB2, 0xB3, 'N'},       {0xB4, 0xB4, 'S'},       {0xB6, 0xB7, 'P'},
    {0xB8, 0xB8, 'S'},       {0xB9, 0xB9, 'N'},       {0xBB, 0xBB, 'P'},
    {0xBC, 0xBE, 'N'},       {0xBF, 0xBF, 'P'},       {0xD7, 0xD7, 'S'},
    {0xF7, 0xF7, 'S'},       {0x2C2, 0x2C5, 'S'},     {0x2D2, 0x2DF, 'S'},
    {0x2E5, 0x2EB, 'S'},     {0x2ED, 0x2ED, 'S'},     {0x2EF, 0x2FF, 'S'},
    {0x375, 0x375, 'S'},     {0x37E, 0x37E, 'P'},     {0x384, 0x385, 'S'},
    {0x387, 0x387, 'P'},     {0x3F6, 0x3F6, 'S'},     {0x482, 0x482, 'S'},
    {0x55A, 0x55F, 'P'},     {0x589, 0x58A, 'P'},     {0x58D, 0x58F, 'S'},
    {0x5BE, 0x5BE, 'P'},     {0x5C0, 0x5C0, 'P'},     {0x5C3, 0x5C3, 'P'},
    {0x5C6, 0x5C6, 'P'},     {0x5F3, 0x5F4, 'P'},     {0x606, 0x608, 'S'},
    {0x609, 0x60A, 'P'},     {0x60B, 0x60B, 'S'},     {0x60C, 0x60D, 'P'},
    {0x60E, 0x60F, 'S'},     {0x61B, 0x61B, 'P'},     {0x61D, 0x61F, 'P'},
    {0x660, 0x669, 'D'},     {0x66A, 0x66D, 'P'},     {0x6D4, 0x6D4, 'P'},
    {0x6DE, 0x6DE, 'S'},     {0x6E9, 0x6E9, 'S'},     {0x6F0, 0x6F9, 'D'},
    {0x6FD, 0x6FE, 'S'},     {0x700, 0x70D, 'P'},     {0x7C0, 0x7C9, 'D'},
    {0x7F6, 0x7F6, 'S'},     {0x7F7, 0x7F9, 'P'},     {0x7FE, 0x7FF, 'S'},
    {0x830, 0x83E, 'P'},     {0x85E, 0x85E, 'P'},     {0x888, 0x888, 'S'},
    {0x964, 0x965, 'P'},     {0x966, 0x96F, 'D'},     {0x970, 0x970, 'P'},
    {0x9E6, 0x9EF, 'D'},     {0x9F2, 0x9F3, 'S'},     {0x9F4, 0x9F9, 'N'},
    {0x9FA, 0x9FB, 'S'},     {0x9FD, 0x9FD, 'P'},     {0xA66, 0xA6F, 'D'},
    {0xA76, 0xA76, 'P'},     {0xAE6, 0xAEF, 'D'},     {0xAF0, 0xAF0, 'P'},
    {0xAF1, 0xAF1, 'S'},     {0xB66, 0xB6F, 'D'},     {0xB70, 0xB70, 'S'},
    {0xB72, 0xB77, 'N'},     {0xBE6, 0xBEF, 'D'},     {0xBF0, 0xBF2, 'N'},
    {0xBF3, 0xBFA, 'S'},     {0xC66, 0xC6F, 'D'},     {0xC77, 0xC77, 'P'},
    {0xC78, 0xC7E, 'N'},     {0xC7F, 0xC7F, 'S'},     {0xC84, 0xC84, 'P'},
    {0xCE6, 0xCEF, 'D'},     {0xD4F, 0xD4F, 'S'},     {0xD58, 0xD5E, 'N'},
    {0xD66, 0xD6F, 'D'},     {0xD70, 0xD78, 'N'},     {0xD79, 0xD79, 'S'},
    {0xDE6, 0xDEF, 'D'},     {0xDF4, 0xDF4, 'P'},     {0xE3F, 0xE3F, 'S'},
    {0xE4F, 0xE4F, 'P'},     {0xE50, 0xE59, 'D'},     {0xE5A, 0xE5B, 'P'},
    {0xED0, 0xED9, 'D'},     {0xF01, 0xF03, 'S'},     {0xF04, 0xF12, 'P'},
    {0xF13, 0xF13, 'S'},     {0xF14, 0xF14, 'P'},     {0xF15, 0xF17, 'S'},
    {0xF1A, 0xF1F, 'S'},     {0xF20, 0xF29, 'D'},     {0xF2A, 0xF33, 'N'},
    {0xF34, 0xF34, 'S'},     {0xF36, 0xF36, 'S'},     {0xF38, 0xF38, 'S'},
    {0xF3A, 0xF3D, 'P'},     {0xF85, 0xF85, 'P'},     {0xFBE, 0xFC5, 'S'},
    {0xFC7, 0xFCC, 'S'},     {0xFCE, 0xFCF, 'S'},     {0xFD0, 0xFD4, 'P'},
    {0xFD5, 0xFD8, 'S'},     {0xFD9, 0xFDA, 'P'},     {0x1040, 0x1049, 'D'},
    {0x104A, 0x104F, 'P'},   {0x1090, 0x1099, 'D'},   {0x109E, 0x109F, 'S'},
    {0x10FB, 0x10FB, 'P'},   {0x1360, 0x1368, 'P'},   {0x1369, 0x137C, 'N'},
    {0x1390, 0x1399, 'S'},   {0x1400, 0x1400, 'P'},   {0x166D, 0x166D, 'S'},
    {0x166E, 0x166E, 'P'},   {0x169B, 0x169C, 'P'},   {0x16EB, 0x16ED, 'P'},
    {0x16EE, 0x16F0, 'N'},   {0x1735, 0x1736, 'P'},   {0x17D4, 0x17D6, 'P'},
    {0x17D8, 0x17DA, 'P'},   {0x17DB, 0x17DB, 'S'},   {0x17E0, 0x17E9, 'D'},
    {0x17F0, 0x17F9, 'N'},   {0x1800, 0x180A, 'P'},   {0x1810, 0x1819, 'D'},
    {0x1940, 0x1940, 'S'},   {0x1944, 0x1945, 'P'},   {0x1946, 0x194F, 'D'},
    {0x19D0, 0x19D9, 'D'},   {0x19DA, 0x19DA, 'N'},   {0x19DE, 0x19FF, 'S'},
    {0x1A1E, 0x1A1F, 'P'},   {0x1A80, 0x1A89, 'D'},   {0x1A90, 0x1A99, 'D'},
    {0x1AA0, 0x1AA6, 'P'},   {0x1AA8, 0x1AAD, 'P'},   {0x1B50, 0x1B59, 'D'},
    {0x1B5A, 0x1B60, 'P'},   {0x1B61, 0x1B6A, 'S'},   {0x1B74, 0x1B7C, 'S'},
    {0x1B7D, 0x1B7E, 'P'},   {0x1BB0, 0x1BB9, 'D'},   {0x1BFC, 0x1BFF, 'P'},
    {0x1C3B, 0x1C3F, 'P'},   {0x1C40, 0x1C49, 'D'},   {0x1C50, 0x1C59, 'D'},
    {0x1C7E, 0x1C7F, 'P'},   {0x1CC0, 0x1CC7, 'P'},   {0x1CD3, 0x1CD3, 'P'},
    {0x1FBD, 0x1FBD, 'S'},   {0x1FBF, 0x1FC1, 'S'},   {0x1FCD, 0x1FCF, 'S'},
    {0x1FDD, 0x1FDF, 'S'},   {0x1FED, 0x1FEF, 'S'},   {0x1FFD, 0x1FFE, 'S'},
    {0x2010, 0x2027, 'P'},   {0x2030, 0x2043, 'P'},   {0x2044, 0x2044, 'S'},
    {0x2045, 0x2051, 'P'},   {0x2052, 0x2052, 'S'},   {0x2053, 0x205E, 'P'},
    {0x2070, 0x2070, 'N'},   {0x2074, 0x2079, 'N'},   {0x207A, 0x207C, 'S'},
    {0x207D, 0x207E, 'P'},   {0x2080, 0x2089, 'N'},   {0x208A, 0x208C, 'S'},
    {0x208D, 0x208E, 'P'},   {0x20A0, 0x20C0, 'S'},   {0x2100, 0x2101, 'S'},
    {0x2103, 0x2106, 'S'},   {0x2108, 0x2109, 'S'},   {0x2114, 0x2114, 'S'},
    {0x2116, 0x2118, 'S'},   {0x211E, 0x2123, 'S'},   {0x2125, 0x2125, 'S'},
    {0x2127, 0x2127, 'S'},   {0x2129, 0x2129, 'S'},   {0x212E, 0x212E, 'S'},
    {0x213A, 0x213B, 'S'},   {0x2140, 0x2144, 'S'},   {0x214A, 0x214D, 'S'},
    {0x214F, 0x214F, 'S'},   {0x2150, 0x2182, 'N'},   {0x2185, 0x2189, 'N'},
    {0x218A, 0x218B, 'S'},   {0x2190, 0x2307, 'S'},   {0x2308, 0x230B, 'P'},
    {0x230C, 0x2328, 'S'},   {0x2329, 0x232A, 'P'},   {0x232B, 0x2426, 'S'},
    {0x2440, 0x244A, 'S'},   {0x2460, 0x249B, 'N'},   {0x249C, 0x24E9, 'S'},
    {0x24EA, 0x24FF, 'N'},   {0x2500, 0x2767, 'S'},   {0x2768, 0x2775, 'P'},
    {0x2776, 0x2793, 'N'},   {0x2794, 0x27C4, 'S'},   {0x27C5, 0x27C6, 'P'},
    {0x27C7, 0x27E5, 'S'},   {0x27E6, 0x27EF, 'P'},   {0x27F0, 0x2982, 'S'},
    {0x2983, 0x2998, 'P'},   {0x2999, 0x29D7, 'S'},   {0x29D8, 0x29DB, 'P'},
    {0x29DC, 0x29FB, 'S'},   {0x29FC, 0x29FD, 'P'},   {0x29FE, 0x2B73, 'S'},
    {0x2B76, 0x2B95, 'S'},   {0x2B97, 0x2BFF, 'S'},   {0x2CE5, 0x2CEA, 'S'},
    {0x2CF9, 0x2CFC, 'P'},   {0x2CFD, 0x2CFD, 'N'},   {0x2CFE, 0x2CFF, 'P'},
    {0x2D70, 0x2D70, 'P'},   {0x2E00, 0x2E2E, 'P'},   {0x2E30, 0x2E4F, 'P'},
    {0x2E50, 0x2E51, 'S'},   {0x2E52, 0x2E5D, 'P'},   {0x2E80, 0x2E99, 'S'},
    {0x2E9B, 0x2EF3, 'S'},   {0x2F00, 0x2FD5, 'S'},   {0x2FF0, 0x2FFB, 'S'},
    {0x3001, 0x3003, 'P'},   {0x3004, 0x3004, 'S'},   {0x3007, 0x3007, 'N'},
    {0x3008, 0x3011, 'P'},   {0x3012, 0x3013, 'S'},   {0x3014, 0x301F, 'P'},
    {0x3020, 0x3020, 'S'},   {0x3021, 0x3029, 'N'},   {0x3030, 0x3030, 'P'},
    {0x3036, 0x3037, 'S'},   {0x3038, 0x303A, 'N'},   {0x303D, 0x303D, 'P'},
    {0x303E, 0x303F, 'S'},   {0x309B, 0x309C, 'S'},   {0x30A0, 0x30A0, 'P'},
    {0x30FB, 0x30FB, 'P'},   {0x3190, 0x3191, 'S'},   {0x3192, 0x3195, 'N'},
    {0x3196, 0x319F, 'S'},   {0x31C0, 0x31E3, 'S'},   {0x3200, 0x321E, 'S'},
    {0x3220, 0x3229, 'N'},   {0x322A, 0x3247, 'S'},   {0x3248, 0x324F, 'N'},
    {0x3250, 0x3250, 'S'},   {0x3251, 0x325F, 'N'},   {0x3260, 0x327F, 'S'},
    {0x3280, 0x3289, 'N'},   {0x328A, 0x32B0, 'S'},   {0x32B1, 0x32BF, 'N'},
    {0x32C0, 0x33FF, 'S'},   {0x4DC0, 0x4DFF, 'S'},   {0xA490, 0xA4C6, 'S'},
    {0xA4FE, 0xA4FF, 'P'},   {0xA60D, 0xA60F, 'P'},   {0xA620, 0xA629, 'D'},
    {0xA673, 0xA673, 'P'},   {0xA67E, 0xA67E, 'P'},   {0xA6E6, 0xA6EF, 'N'},
    {0xA6F2, 0xA6F7, 'P'},   {0xA700, 0xA716, 'S'},   {0xA720, 0xA721, 'S'},
    {0xA789, 0xA78A, 'S'},   {0xA828, 0xA82B, 'S'},   {0xA830, 0xA835, 'N'},
    {0xA836, 0xA839, 'S'},   {0xA874, 0xA877, 'P'},   {0xA8CE, 0xA8CF, 'P'},
    {0xA8D0, 0xA8D9, 'D'},   {0xA8F8, 0xA8FA, 'P'},   {0xA8FC, 0xA8FC, 'P'},
    {0xA900, 0xA909, 'D'},   {0xA92E, 0xA92F, 'P'},   {0xA95F, 0xA95F, 'P'},
    {0xA9C1, 0xA9CD, 'P'},   {0xA9D0, 0xA9D9, 'D'},   {0xA9DE, 0xA9DF, 'P'},
    {0xA9F0, 0xA9F9, 'D'},   {0xAA50, 0xAA59, 'D'},   {0xAA5C, 0xAA5F, 'P'},
    {0xAA77, 0xAA79, 'S'},   {0xAADE, 0xAADF, 'P'},   {0xAAF0, 0xAAF1, 'P'},
    {0xAB5B, 0xAB5B, 'S'},   {0xAB6A, 0xAB6B, 'S'},   {0xABEB, 0xABEB, 'P'},
    {0xABF0, 0xABF9, 'D'},   {0xFB29, 0xFB29, 'S'},   {0xFBB2, 0xFBC2, 'S'},
    {0xFD3E, 0xFD3F, 'P'},   {0xFD40, 0xFD4F, 'S'},   {0xFDCF, 0xFDCF, 'S'},
    {0xFDFC, 0xFDFF, 'S'},   {0xFE10, 0xFE19, 'P'},   {0xFE30, 0xFE52, 'P'},
    {0xFE54, 0xFE61, 'P'},   {0xFE62, 0xFE62, 'S'},   {0xFE63, 0xFE63, 'P'},
    {0xFE64, 0xFE66, 'S'},   {0xFE68, 0xFE68, 'P'},   {0xFE69, 0xFE69, 'S'},
    {0xFE6A, 0xFE6B, 'P'},   {0xFF01, 0xFF03, 'P'},   {0xFF04, 0xFF04, 'S'},
    {0xFF05, 0xFF0A, 'P'},   {0xFF0B, 0xFF0B, 'S'},   {0xFF0C, 0xFF0F, 'P'},
    {0xFF10, 0xFF19, 'D'},   {0xFF1A, 0xFF1B, 'P'},   {0xFF1C, 0xFF1E, 'S'},
    {0xFF1F, 0xFF20, 'P'},   {0xFF3B, 0xFF3D, 'P'},   {0xFF3E, 0xFF3E, 'S'},
    {0xFF3F, 0xFF3F, 'P'},   {0xFF40, 0xFF40, 'S'},   {0xFF5B, 0xFF5B, 'P'},
    {0xFF5C, 0xFF5C, 'S'},   {0xFF5D, 0xFF5D, 'P'},   {0xFF5E, 0xFF5E, 'S'},
    {0xFF5F, 0xFF65, 'P'},   {0xFFE0, 0xFFE6, 'S'},   {0xFFE8, 0xFFEE, 'S'},
    {0xFFFC, 0xFFFD, 'S'},   {0x10100, 0x10102, 'P'}, {0x10107, 0x10133, 'N'},
    {0x10137, 0x1013F, 'S'}, {0x10140, 0x10178, 'N'}, {0x10179, 0x10189, 'S'},
    {0x1018A, 0x1018B, 'N'}, {0x1018C, 0x1018E, 'S'}, {0x10190, 0x1019C, 'S'},
    {0x101A0, 0x101A0, 'S'}, {0x101D0, 0x101FC, 'S'}, {0x102E1, 0x102FB, 'N'},
    {0x10320, 0x10323, 'N'}, {0x10341, 0x10341, 'N'}, {0x1034A, 0x1034A, 'N'},
    {0x1039F, 0x1039F, 'P'}, {0x103D0, 0x103D0, 'P'}, {0x103D1, 0x103D5, 'N'},
    {0x104A0, 0x104A9, 'D'}, {0x1056F, 0x1056F, 'P'}, {0x10857, 0x10857, 'P'},
    {0x10858, 0x1085F, 'N'}, {0x10877, 0x10878, 'S'}, {0x10879, 0x1087F, 'N'},
    {0x108A7, 0x108AF, 'N'}, {0x108FB, 0x108FF, 'N'}, {0x10916, 0x1091B, 'N'},
    {0x1091F, 0x1091F, 'P'}, {0x1093F, 0x1093F, 'P'}, {0x109BC, 0x109BD, 'N'},
    {0x109C0, 0x109CF, 'N'}, {0x109D2, 0x109FF, 'N'}, {0x10A40, 0x10A48, 'N'},
    {0x10A50, 0x10A58, 'P'}, {0x10A7D, 0x10A7E, 'N'}, {0x10A7F, 0x10A7F, 'P'},
    {0x10A9D, 0x10A9F, 'N'}, {0x10AC8, 0x10AC8, 'S'}, {0x10AEB, 0x10AEF, 'N'},
    {0x10AF0, 0x10AF6, 'P'}, {0x10B39, 0x10B3F, 'P'}, {0x10B58, 0x10B5F, 'N'},
    {0x10B78, 0x10B7F, 'N'}, {0x10B99, 0x10B9C, 'P'}, {0x10BA9, 0x10BAF, 'N'},
    {0x10CFA, 0x10CFF, 'N'}, {0x10D30, 0x10D39, 'D'}, {0x10E60, 0x10E7E, 'N'},
    {0x10EAD, 0x10EAD, 'P'}, {0x10F1D, 0x10F26, 'N'}, {0x10F51, 0x10F54, 'N'},
    {0x10F55, 0x10F59, 'P'}, {0x10F86, 0x10F89, 'P'}, {0x10FC5, 0x10FCB, 'N'},
    {0x11047, 0x1104D, 'P'}, {0x11052, 0x11065, 'N'}, {0x11066, 0x1106F, 'D'},
    {0x110BB, 0x110BC, 'P'}, {0x110BE, 0x110C1, 'P'}, {0x110F0, 0x110F9, 'D'},
    {0x11136, 0x1113F, 'D'}, {0x11140, 0x11143, 'P'}, {0x11174, 0x11175, 'P'},
    {0x111C5, 0x111C8, 'P'}, {0x111CD, 0x111CD, 'P'}, {0x111D0, 0x111D9, 'D'},
    {0x111DB, 0x111DB, 'P'}, {0x111DD, 0x111DF, 'P'}, {0x111E1, 0x111F4, 'N'},
    {0x11238, 0x1123D, 'P'}, {0x112A9, 0x112A9, 'P'}, {0x112F0, 0x112F9, 'D'},
    {0x1144B, 0x1144F, 'P'}, {0x11450, 0x11459, 'D'}, {0x1145A, 0x1145B, 'P'},
    {0x1145D, 0x1145D, 'P'}, {0x114C6, 0x114C6, 'P'}, {0x114D0, 0x114D9, 'D'},
    {0x115C1, 0x115D7, 'P'}, {0x11641, 0x11643, 'P'}, {0x11650, 0x11659, 'D'},
    {0x11660, 0x1166C, 'P'}, {0x116B9, 0x116B9, 'P'}, {0x116C0, 0x116C9, 'D'},
    {0x11730, 0x11739, 'D'}, {0x1173A, 0x1173B, 'N'}, {0x1173C, 0x1173E, 'P'},
    {0x1173F, 0x1173F, 'S'}, {0x1183B, 0x1183B, 'P'}, {0x118E0, 0x118E9, 'D'},
    {0x118EA, 0x118F2, 'N'}, {0x11944, 0x11946, 'P'}, {0x11950, 0x11959, 'D'},
    {0x119E2, 0x119E2, 'P'}, {0x11A3F, 0x11A46, 'P'}, {0x11A9A, 0x11A9C, 'P'},
    {0x11A9E, 0x11AA2, 'P'}, {0x11C41, 0x11C45, 'P'}, {0x11C50, 0x11C59, 'D'},
    {0x11C5A, 0x11C6C, 'N'}, {0x11C70, 0x11C71, 'P'}, {0x11D50, 0x11D59, 'D'},
    {0x11DA0, 0x11DA9, 'D'}, {0x11EF7, 0x11EF8, 'P'}, {0x11FC0, 0x11FD4, 'N'},
    {0x11FD5, 0x11FF1, 'S'}, {0x11FFF, 0x11FFF, 'P'}, {0x12400, 0x1246E, 'N'},
    {0x12470, 0x12474, 'P'}, {0x12FF1, 0x12FF2, 'P'}, {0x16A60, 0x16A69, 'D'},
    {0x16A6E, 0x16A6F, 'P'}, {0x16AC0, 0x16AC9, 'D'}, {0x16AF5, 0x16AF5, 'P'},
    {0x16B37, 0x16B3B, 'P'}, {0x16B3C, 0x16B3F, 'S'}, {0x16B44, 0x16B44, 'P'},
    {0x16B45, 0x16B45, 'S'}, {0x16B50, 0x16B59, 'D'}, {0x16B5B, 0x16B61, 'N'},
    {0x16E80, 0x16E96, 'N'}, {0x16E97, 0x16E9A, 'P'}, {0x16FE2, 0x16FE2, 'P'},
    {0x1BC9C, 0x1BC9C, 'S'}, {0x1BC9F, 0x1BC9F, 'P'}, {0x1CF50, 0x1CFC3, 'S'},
    {0x1D000, 0x1D0F5, 'S'}, {0x1D100, 0x1D126, 'S'}, {0x1D129, 0x1D164, 'S'},
    {0x1D16A, 0x1D16C, 'S'}, {0x1D183, 0x1D184, 'S'}, {0x1D18C, 0x1D1A9, 'S'},
    {0x1D1AE, 0x1D1EA, 'S'}, {0x1D200, 0x1D241, 'S'}, {0x1D245, 0x1D245, 'S'},
    {0x1D2E0, 0x1D2F3, 'N'}, {0x1D300, 0x1D356, 'S'}, {0x1D360, 0x1D378, 'N'},
    {0x1D6C1, 0x1D6C1, 'S'}, {0x1D6DB, 0x1D6DB, 'S'}, {0x1D6FB, 0x1D6FB, 'S'},
    {0x1D715, 0x1D715, 'S'}, {0x1D735, 0x1D735, 'S'}, {0x1D74F, 0x1D74F, 'S'},
    {0x1D76F, 0x1D76F, 'S'}, {0x1D789, 0x1D789, 'S'}, {0x1D7A9, 0x1D7A9, 'S'},
    {0x1D7C3, 0x1D7C3, 'S'}, {0x1D7CE, 0x1D7FF, 'D'}, {0x1D800, 0x1D9FF, 'S'},
    {0x1DA37, 0x1DA3A, 'S'}, {0x1DA6D, 0x1DA74, 'S'}, {0x1DA76, 0x1DA83, 'S'},
    {0x1DA85, 0x1DA86, 'S'}, {0x1DA87, 0x1DA8B, 'P'}, {0x1E140, 0x1E149, 'D'},
    {0x1E14F, 0x1E14F, 'S'}, {0x1E2F0, 0x1E2F9, 'D'}, {0x1E2FF, 0x1E2FF, 'S'},
    {0x1E8C7, 0x1E8CF, 'N'}, {0x1E950, 0x1E959, 'D'}, {0x1E95E, 0x1E95F, 'P'},
    {0x1EC71, 0x1ECAB, 'N'}, {0x1ECAC, 0x1ECAC, 'S'}, {0x1ECAD, 0x1ECAF, 'N'},
    {0x1ECB0, 0x1ECB0, 'S'}, {0x1ECB1, 0x1ECB4, 'N'}, {0x1ED01, 0x1ED2D, 'N'},
    {0x1ED2E, 0x1ED2E, 'S'}, {0x1ED2F, 0x1ED3D, 'N'}, {0x1EEF0, 0x1EEF1, 'S'},
    {0x1F000, 0x1F02B, 'S'}, {0x1F030, 0x1F093, 'S'}, {0x1F0A0, 0x1F0AE, 'S'},
    {0x1F0B1, 0x1F0BF, 'S'}, {0x1F0C1, 0x1F0CF, 'S'}, {0x1F0D1, 0x1F0F5, 'S'},
    {0x1F100, 0x1F10C, 'N'}, {0x1F10D, 0x1F1AD, 'S'}, {0x1F1E6, 0x1F202, 'S'},
    {0x1F210, 0x1F23B, 'S'}, {0x1F240, 0x1F248, 'S'}, {0x1F250, 0x1F251, 'S'},
    {0x1F260, 0x1F265, 'S'}, {0x1F300, 0x1F6D7, 'S'}, {0x1F6DD, 0x1F6EC, 'S'},
    {0x1F6F0, 0x1F6FC, 'S'}, {0x1F700, 0x1F773, 'S'}, {0x1F780, 0x1F7D8, 'S'},
    {0x1F7E0, 0x1F7EB, 'S'}, {0x1F7F0, 0x1F7F0, 'S'}, {0x1F800, 0x1F80B, 'S'},
    {0x1F810, 0x1F847, 'S'}, {0x1F850, 0x1F859, 'S'}, {0x1F860, 0x1F887, 'S'},
    {0x1F890, 0x1F8AD, 'S'}, {0x1F8B0, 0x1F8B1, 'S'}, {0x1F900, 0x1FA53, 'S'},
    {0x1FA60, 0x1FA6D, 'S'}, {0x1FA70, 0x1FA74, 'S'}, {0x1FA78, 0x1FA7C, 'S'},
    {0x1FA80, 0x1FA86, 'S'}, {0x1FA90, 0x1FAAC, 'S'}, {0x1FAB0, 0x1FABA, 'S'},
    {0x1FAC0, 0x1FAC5, 'S'}, {0x1FAD0, 0x1FAD9, 'S'}, {0x1FAE0, 0x1FAE7, 'S'},
    {0x1FAF0, 0x1FAF6, 'S'}, {0x1FB00, 0x1FB92, 'S'}, {0x1FB94, 0x1FBCA, 'S'},
    {0x1FBF0, 0x1FBF9, 'D'},
};
constexpr LowerRun kLowerRuns[] = {
    {0x41, 0x5A, 1, 32},         {0xC0, 0xD6, 1, 32},         {0xD8, 0xDE, 1, 32},
    {0x100, 0x12E, 2, 1},        {0x132, 0x136, 2, 1},        {0x139, 0x147, 2, 1},
    {0x14A, 0x176, 2, 1},        {0x178, 0x178, 1, -121},     {0x179, 0x17D, 2, 1},
    {0x181, 0x181, 1, 210},      {0x182, 0x184, 2, 1},        {0x186, 0x186, 1, 206},
    {0x187, 0x187, 1, 1},        {0x189, 0x18A, 1, 205},      {0x18B, 0x18B, 1, 1},
    {0x18E, 0x18E, 1, 79},       {0x18F, 0x18F, 1, 202},      {0x190, 0x190, 1, 203},
    {0x191, 0x191, 1, 1},        {0x193, 0x193, 1, 205},      {0x194, 0x194, 1, 207},
    {0x196, 0x196, 1, 211},      {0x197, 0x197, 1, 209},      {0x198, 0x198, 1, 1},
    {0x19C, 0x19C, 1, 211},      {0x19D, 0x19D, 1, 213},      {0x19F, 0x19F, 1, 214},
    {0x1A0, 0x1A4, 2, 1},        {0x1A6, 0x1A6, 1, 218},      {0x1A7, 0x1A7, 1, 1},
    {0x1A9, 0x1A9, 1, 218},      {0x1AC, 0x1AC, 1, 1},        {0x1AE, 0x1AE, 1, 218},
    {0x1AF, 0x1AF, 1, 1},        {0x1B1, 0x1B2, 1, 217},      {0x1B3, 0x1B5, 2, 1},
    {0x1B7, 0x1B7, 1, 219},      {0x1B8, 0x1B8, 1, 1},        {0x1BC, 0x1BC, 1, 1},
    {0x1C4, 0x1C4, 1, 2},        {0x1C5, 0x1C5, 1, 1},        {0x1C7, 0x1C7, 1, 2},
    {0x1C8, 0x1C8, 1, 1},        {0x1CA, 0x1CA, 1, 2},        {0x1CB, 0x1DB, 2, 1},
    {0x1DE, 0x1EE, 2, 1},        {0x1F1, 0x1F1, 1, 2},        {0x1F2, 0x1F4, 2, 1},
    {0x1F6, 0x1F6, 1, -97},      {0x1F7, 0x1F7, 1, -56},      {0x1F8, 0x21E, 2, 1},
    {0x220, 0x220, 1, -130},     {0x222, 0x232, 2, 1},        {0x23A, 0x23A, 1, 10795},
    {0x23B, 0x23B, 1, 1},        {0x23D, 0x23D, 1, -163},     {0x23E, 0x23E, 1, 10792},
    {0x241, 0x241, 1, 1},        {0x243, 0x243, 1, -195},     {0x244, 0x244, 1, 69},
    {0x245, 0x245, 1, 71},       {0x246, 0x24E, 2, 1},        {0x370, 0x372, 2, 1},
    {0x376, 0x376, 1, 1},        {0x37F, 0x37F, 1, 116},      {0x386, 0x386, 1, 38},
    {0x388, 0x38A, 1, 37},       {0x38C, 0x38C, 1, 64},       {0x38E, 0x38F, 1, 63},
    {0x391, 0x3A1, 1, 32},       {0x3A3, 0x3AB, 1, 32},       {0x3CF, 0x3CF, 1, 8},
    {0x3D8, 0x3EE, 2, 1},        {0x3F4, 0x3F4, 1, -60},      {0x3F7, 0x3F7, 1, 1},
    {0x3F9, 0x3F9, 1, -7},       {0x3FA, 0x3FA, 1, 1},        {0x3FD, 0x3FF, 1, -130},
    {0x400, 0x40F, 1, 80},       {0x410, 0x42F, 1, 32},       {0x460, 0x480, 2, 1},
    {0x48A, 0x4BE, 2, 1},        {0x4C0, 0x4C0, 1, 15},       {0x4C1, 0x4CD, 2, 1},
    {0x4D0, 0x52E, 2, 1},        {0x531, 0x556, 1, 48},       {0x10A0, 0x10C5, 1, 7264},
    {0x10C7, 0x10C7, 1, 7264},   {0x10CD, 0x10CD, 1, 7264},   {0x13A0, 0x13EF, 1, 38864},
    {0x13F0, 0x13F5, 1, 8},      {0x1C90, 0x1CBA, 1, -3008},  {0x1CBD, 0x1CBF, 1, -3008},
    {0x1E00, 0x1E94, 2, 1},      {0x1E9E, 0x1E9E, 1, -7615},  {0x1EA0, 0x1EFE, 2, 1},
    {0x1F08, 0x1F0F, 1, -8},     {0x1F18, 0x1F1D, 1, -8},     {0x1F28, 0x1F2F, 1, -8},
    {0x1F38, 0x1F3F, 1, -8},     {0x1F48, 0x1F4D, 1, -8},     {0x1F59, 0x1F5F, 2, -8},
    {0x1F68, 0x1F6F, 1, -8},     {0x1F88, 0x1F8F, 1, -8},     {0x1F98, 0x1F9F, 1, -8},
    {0x1FA8, 0x1FAF, 1, -8},     {0x1FB8, 0x1FB9, 1, -8},     {0x1FBA, 0x1FBB, 1, -74},
    {0x1FBC, 0x1FBC, 1, -9},     {0x1FC8, 0x1FCB, 1, -86},    {0x1FCC, 0x1FCC, 1, -9},
    {0x1FD8, 0x1FD9, 1, -8},     {0x1FDA, 0x1FDB, 1, -100},   {0x1FE8, 0x1FE9, 1, -8},
    {0x1FEA, 0x1FEB, 1, -112},   {0x1FEC, 0x1FEC, 1, -7},     {0x1FF8, 0x1FF9, 1, -128},
    {0x1FFA, 0x1FFB, 1, -126},   {0x1FFC, 0x1FFC, 1, -9},     {0x2126, 0x2126, 1, -7517},
    {0x212A, 0x212A, 1, -8383},  {0x212B, 0x212B, 1, -8262},  {0x2132, 0x2132, 1, 28},
    {0x2160, 0x216F, 1, 16},     {0x2183, 0x2183, 1, 1},      {0x24B6, 0x24CF, 1, 26},
    {0x2C00, 0x2C2F, 1, 48},     {0x2C60, 0x2C60, 1, 1},      {0x2C62, 0x2C62, 1, -10743},
    {0x2C63, 0x2C63, 1, -3814},  {0x2C64, 0x2C64, 1, -10727}, {0x2C67, 0x2C6B, 2, 1},
    {0x2C6D, 0x2C6D, 1, -10780}, {0x2C6E, 0x2C6E, 1, -10749}, {0x2C6F, 0x2C6F, 1, -10783},
    {0x2C70, 0x2C70, 1, -10782}, {0x2C72, 0x2C72, 1, 1},      {0x2C75, 0x2C75, 1, 1},
    {0x2C7E, 0x2C7F, 1, -10815}, {0x2C80, 0x2CE2, 2, 1},      {0x2CEB, 0x2CED, 2, 1},
    {0x2CF2, 0x2CF2, 1, 1},      {0xA640, 0xA66C, 2, 1},      {0xA680, 0xA69A, 2, 1},
    {0xA722, 0xA72E, 2, 1},      {0xA732, 0xA76E, 2, 1},      {0xA779, 0xA77B, 2, 1},
    {0xA77D, 0xA77D, 1, -35332}, {0xA77E, 0xA786, 2, 1},      {0xA78B, 0xA78B, 1, 1},
    {0xA78D, 0xA78D, 1, -42280}, {0xA790, 0xA792, 2, 1},      {0xA796, 0xA7A8, 2, 1},
    {0xA7AA, 0xA7AA, 1, -42308}, {0xA7AB, 0xA7AB, 1, -42319}, {0xA7AC, 0xA7AC, 1, -42315},
    {0xA7AD, 0xA7AD, 1, -42305}, {0xA7AE, 0xA7AE, 1, -42308}, {0xA7B0, 0xA7B0, 1, -42258},
    {0xA7B1, 0xA7B1, 1, -42282}, {0xA7B2, 0xA7B2, 1, -42261}, {0xA7B3, 0xA7B3, 1, 928},
    {0xA7B4, 0xA7C2, 2, 1},      {0xA7C4, 0xA7C4, 1, -48},    {0xA7C5, 0xA7C5, 1, -42307},
    {0xA7C6, 0xA7C6, 1, -35384}, {0xA7C7, 0xA7C9, 2, 1},      {0xA7D0, 0xA7D0, 1, 1},
    {0xA7D6, 0xA7D8, 2, 1},      {0xA7F5, 0xA7F5, 1, 1},      {0xFF21, 0xFF3A, 1, 32},
    {0x10400, 0x10427, 1, 40},   {0x104B0, 0x104D3, 1, 40},   {0x10570, 0x1057A, 1, 39},
    {0x1057C, 0x1058A, 1, 39},   {0x1058C, 0x10592, 1, 39},   {0x10594, 0x10595, 1, 39},
    {0x10C80, 0x10CB2, 1, 64},   {0x118A0, 0x118BF, 1, 32},   {0x16E40, 0x16E5F, 1, 32},
    {0x1E900, 0x1E921, 1, 34},
};
constexpr CodeRange kCasedRanges[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xAA, 0xAA},       {0xB5, 0xB5},
    {0xBA, 0xBA},       {0xC0, 0xD6},       {0xD8, 0xF6},       {0xF8, 0x1BA},
    {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2B8},     {0x2C0, 0x2C1},
    {0x2E0, 0x2E4},     {0x345, 0x345},     {0x370, 0x373},     {0x376, 0x377},
    {0x37A, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},
    {0x48A, 0x52F},     {0x531, 0x556},     {0x560, 0x588},     {0x10A0, 0x10C5},
    {0x10C7, 0x10C7},   {0x10CD, 0x10CD},   {0x10D0, 0x10FA},   {0x10FD, 0x10FF},
    {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C80, 0x1C88},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1DBF},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC},   {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2160, 0x217F},   {0x2183, 0x2184},
    {0x24B6, 0x24E9},   {0x2C00, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},
    {0x2D00, 0x2D25},   {0x2D27, 0x2D27},   {0x2D2D, 0x2D2D},   {0xA640, 0xA66D},
    {0xA680, 0xA69D},   {0xA722, 0xA787},   {0xA78B, 0xA78E},   {0xA790, 0xA7CA},
    {0xA7D0, 0xA7D1},   {0xA7D3, 0xA7D3},   {0xA7D5, 0xA7D9},   {0xA7F5, 0xA7F6},
    {0xA7F8, 0xA7FA},   {0xAB30, 0xAB5A},   {0xAB5C, 0xAB68},   {0xAB70, 0xABBF},
    {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
    {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10570, 0x1057A},
    {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1},
    {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x10780, 0x10780},
    {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x16E40, 0x16E7F}, {0x1D400, 0x1D454},
    {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6},
    {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3},
    {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546},
    {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA},
    {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714}, {0x1D716, 0x1D734}, {0x1D736, 0x1D74E},
    {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8}, {0x1D7AA, 0x1D7C2},
    {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF09}, {0x1DF0B, 0x1DF1E}, {0x1E900, 0x1E943},
    {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
};

template <typename Range, std::size_t N>
const Range* find_range(const Range (&table)[N], char32_t c) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), c,
                                     [](char32_t value, const Range& r) { return value < r.lo; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return c <= it->hi ? it : nullptr;
}

char category(char32_t c) {
  const CategoryRange* r = find_range(kCategoryRanges, c);
  return r ? r->category : '\0';
}
bool is_punctuation(char32_t c) { return category(c) == 'P'; }
bool is_symbol(char32_t c) { return category(c) == 'S'; }
bool is_not_number(char32_t c) {  // regex \P{N}
  const char k = category(c);
  return k != 'D' && k != 'N';
}
bool is_not_decimal(char32_t c) { return category(c) != 'D'; }  // Python re [^\d]
bool is_cased(char32_t c) { return find_range(kCasedRanges, c) != nullptr; }

// Python's str.isspace(): what str.split() and str.rstrip() strip.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::u32string decode_utf8(const std::string& text) {
  const std::size_t bad = garden::unicode::invalid_utf8_offset(text);
  if (bad != std::string_view::npos)
    throw Error("invalid UTF-8 at byte offset " + std::to_string(bad) + " in BLEU input");
  const auto points = garden::unicode::decode_utf8(text);
  return std::u32string(points.begin(), points.end());
}

std::string encode_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) garden::unicode::append_utf8(c, out);
  return out;
}

// re.sub(r"(X)", r" \1 ", s) for a one-character class X.
template <typename Pred>
std::u32string pad_each(const std::u32string& s, Pred matches) {
  std::u32string out;
  out.reserve(s.size() * 2);
  for (char32_t c : s) {
    if (matches(c)) {
      out += U' ';
      out += c;
      out += U' ';
    } else {
      out += c;
    }
  }
  return out;
}

// re.sub(r"(A)(B)", repl, s) for one-character classes A and B, where repl is
// r"\1 \2 " (space_after) or r" \1 \2" (otherwise). Like re.sub, scanning resumes
// after the matched pair, so the second character cannot start another match.
template <typename PredA, typename PredB>
std::u32string split_pair(const std::u32string& s, PredA first, PredB second, bool space_after) {
  std::u32string out;
  out.reserve(s.size() * 2);
  std::size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      if (!space_after) out += U' ';
      out += s[i];
      out += U' ';
      out += s[i + 1];
      if (space_after) out += U' ';
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Python's str.split() with no argument.
std::vector<std::string> split_whitespace(const std::u32string& s) {
  std::vector<std::string> tokens;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    const std::size_t start = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    if (i > start) tokens.push_back(encode_utf8(s.substr(start, i - start)));
  }
  return tokens;
}

std::string join(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& t : tokens) {
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  std::size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// mteval-v13a's punctuation class [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII punctuation
// except the apostrophe, comma, hyphen and period, which get the rules below.
bool is_13a_punctuation(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == U'/';
}
bool is_ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }
bool is_not_ascii_digit(char32_t c) { return !is_ascii_digit(c); }
bool is_period_or_comma(char32_t c) { return c == U'.' || c == U','; }

std::u32string tokenize_13a(std::string line) {
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  std::u32string s = decode_utf8(" " + line + " ");
  s = pad_each(s, is_13a_punctuation);
  // Periods and commas split off unless between digits (1,000.5 stays one token).
  s = split_pair(s, is_not_ascii_digit, is_period_or_comma, /*space_after=*/true);
  s = split_pair(s, is_period_or_comma, is_not_ascii_digit, /*space_after=*/false);
  // A dash after a digit splits off (ranges like 1990-2000).
  s = split_pair(
      s, is_ascii_digit, [](char32_t c) { return c == U'-'; }, /*space_after=*/true);
  return s;
}

std::u32string tokenize_intl(const std::string& line) {
  std::u32string s = decode_utf8(line);
  s = split_pair(s, is_not_number, is_punctuation, /*space_after=*/true);
  s = split_pair(s, is_punctuation, is_not_number, /*space_after=*/false);
  return pad_each(s, is_symbol);
}

std::vector<std::string> tokens_of(const std::string& line, BleuTokenizer tokenizer) {
  switch (tokenizer) {
    case BleuTokenizer::k13a:
      return split_whitespace(tokenize_13a(line));
    case BleuTokenizer::kIntl:
      return split_whitespace(tokenize_intl(line));
    case BleuTokenizer::kNone:
      break;
  }
  return split_whitespace(decode_utf8(line));
}

// Python's str.rstrip().
std::string rstrip(const std::string& text) {
  std::u32string s = decode_utf8(text);
  while (!s.empty() && is_space(s.back())) s.pop_back();
  return encode_utf8(s);
}

// sacreBLEU's BLEU._preprocess_segment followed by the split into words.
std::vector<std::string> preprocess(const std::string& segment, const BleuOptions& options) {
  const std::string cased = options.lowercase ? unicode_lowercase(segment) : segment;
  return tokens_of(rstrip(cased), options.tokenize);
}

// n-gram -> count for n = 1..max_order. Tokens never contain whitespace, so joining
// them with a space gives a unique key (and n-grams of different orders differ).
using NgramCounts = std::unordered_map<std::string, int64_t>;

NgramCounts count_ngrams(const std::vector<std::string>& tokens, int max_order) {
  NgramCounts counts;
  for (int n = 1; n <= max_order; ++n) {
    for (std::size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key = tokens[i];
      for (int k = 1; k < n; ++k) key += ' ' + tokens[i + k];
      ++counts[key];
    }
  }
  return counts;
}

int order_of(const std::string& ngram) {
  return 1 + static_cast<int>(std::count(ngram.begin(), ngram.end(), ' '));
}

// The reference length closest to the hypothesis length; the shorter one on ties.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1, best_len = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - len);
    if (best_diff == -1 || diff < best_diff) {
      best_diff = diff;
      best_len = len;
    } else if (diff == best_diff && len < best_len) {
      best_len = len;
    }
  }
  return best_len;
}

// sacreBLEU's my_log: log, with log(0) floored so exp() of the mean gives 0.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace

BleuTokenizer parse_bleu_tokenizer(const std::string& name) {
  if (name == "13a") return BleuTokenizer::k13a;
  if (name == "intl") return BleuTokenizer::kIntl;
  if (name == "none") return BleuTokenizer::kNone;
  throw Error("unknown BLEU tokenizer '" + name + "' (expected 13a, intl or none)");
}

std::string BleuScore::format() const {
  std::string precision_text;
  for (std::size_t i = 0; i < precisions.size(); ++i)
    precision_text += (i ? "/" : "") + fixed(precisions[i], 1);
  return "BLEU = " + fixed(score, 2) + " " + precision_text + " (BP = " + fixed(bp, 3) +
         " ratio = " + fixed(ratio, 3) + " hyp_len = " + std::to_string(hyp_len) +
         " ref_len = " + std::to_string(ref_len) + ")";
}

std::string bleu_tokenize(const std::string& line, BleuTokenizer tokenizer) {
  return join(tokens_of(line, tokenizer));
}

std::string unicode_lowercase(const std::string& text) {
  const std::u32string s = decode_utf8(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c == 0x130) {  // the one code point whose lowercase is two: i + combining dot
      garden::unicode::append_utf8(0x69, out);
      garden::unicode::append_utf8(0x307, out);
      continue;
    }
    if (c == 0x3A3) {  // capital sigma: final form at the end of a word
      const bool after_cased = i > 0 && is_cased(s[i - 1]);
      const bool before_cased = i + 1 < s.size() && is_cased(s[i + 1]);
      garden::unicode::append_utf8(after_cased && !before_cased ? 0x3C2 : 0x3C3, out);
      continue;
    }
    const LowerRun* run = find_range(kLowerRuns, c);
    if (run && (c - run->lo) % run->stride == 0)
      garden::unicode::append_utf8(static_cast<char32_t>(static_cast<int64_t>(c) + run->delta), out);
    else
      garden::unicode::append_utf8(c, out);
  }
  return out;
}

BleuScore compute_bleu(const std::vector<int64_t>& correct, const std::vector<int64_t>& total,
                       int64_t hyp_len, int64_t ref_len, const BleuOptions& options) {
  const int max_order = options.max_ngram_order;
  if (max_order < 1) throw Error("BLEU max_ngram_order must be >= 1");
  if (correct.size() != static_cast<std::size_t>(max_order) || total.size() != correct.size())
    throw Error("BLEU statistics need one correct and one total count per n-gram order");

  BleuScore result;
  result.counts = correct;
  result.totals = total;
  result.hyp_len = hyp_len;
  result.ref_len = ref_len;
  result.ratio = ref_len ? static_cast<double>(hyp_len) / static_cast<double>(ref_len) : 0.0;
  result.precisions.assign(max_order, 0.0);
  if (hyp_len < ref_len)
    result.bp = hyp_len > 0
                    ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(hyp_len))
                    : 0.0;

  // No matched n-gram of any order: 0, whatever the smoothing (sacreBLEU #141).
  if (std::all_of(correct.begin(), correct.end(), [](int64_t c) { return c == 0; })) return result;

  double smooth_value = 0;
  if (options.smooth_method == BleuSmoothing::kFloor)
    smooth_value = options.smooth_value.value_or(0.1);
  if (options.smooth_method == BleuSmoothing::kAddK)
    smooth_value = options.smooth_value.value_or(1.0);

  double smooth_exp = 1.0;
  int effective_order = max_order;
  for (int n = 1; n <= max_order; ++n) {
    double matched = static_cast<double>(correct[n - 1]);
    double possible = static_cast<double>(total[n - 1]);
    if (options.smooth_method == BleuSmoothing::kAddK && n > 1) {
      matched += smooth_value;
      possible += smooth_value;
    }
    if (possible == 0) break;
    // Effective order drops the orders the hypothesis is too short to have.
    if (options.use_effective_order) effective_order = n;
    if (matched == 0) {
      if (options.smooth_method == BleuSmoothing::kExp) {
        smooth_exp *= 2;  // NIST: halve the pseudo-count at each further empty order
        result.precisions[n - 1] = 100.0 / (smooth_exp * possible);
      } else if (options.smooth_method == BleuSmoothing::kFloor) {
        result.precisions[n - 1] = 100.0 * smooth_value / possible;
      }
    } else {
      result.precisions[n - 1] = 100.0 * matched / possible;
    }
  }
  double log_sum = 0;
  for (int n = 0; n < effective_order; ++n) log_sum += floored_log(result.precisions[n]);
  result.score = result.bp * std::exp(log_sum / effective_order);
  return result;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& reference_streams,
                      const BleuOptions& options) {
  if (reference_streams.empty()) throw Error("BLEU needs at least one reference stream");
  for (std::size_t r = 0; r < reference_streams.size(); ++r) {
    if (reference_streams[r].size() != hypotheses.size())
      throw Error("BLEU reference stream " + std::to_string(r + 1) + " has " +
                  std::to_string(reference_streams[r].size()) + " segments but there are " +
                  std::to_string(hypotheses.size()) + " hypotheses");
  }
  const int max_order = options.max_ngram_order;
  if (max_order < 1) throw Error("BLEU max_ngram_order must be >= 1");
  std::vector<int64_t> correct(max_order, 0), total(max_order, 0);
  int64_t hyp_len = 0, ref_len = 0;
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    // A hypothesis n-gram is credited up to its largest count in any one reference.
    NgramCounts ref_ngrams;
    std::vector<int64_t> ref_lens;
    for (const auto& stream : reference_streams) {
      const auto ref_tokens = preprocess(stream[i], options);
      ref_lens.push_back(static_cast<int64_t>(ref_tokens.size()));
      for (const auto& [ngram, count] : count_ngrams(ref_tokens, max_order)) {
        int64_t& best = ref_ngrams[ngram];
        best = std::max(best, count);
      }
    }
    const auto hyp_tokens = preprocess(hypotheses[i], options);
    const auto segment_len = static_cast<int64_t>(hyp_tokens.size());
    for (const auto& [ngram, count] : count_ngrams(hyp_tokens, max_order)) {
      const int n = order_of(ngram);
      total[n - 1] += count;
      const auto found = ref_ngrams.find(ngram);
      if (found != ref_ngrams.end()) correct[n - 1] += std::min(count, found->second);
    }
    hyp_len += segment_len;
    ref_len += closest_ref_len(segment_len, ref_lens);
  }
  return compute_bleu(correct, total, hyp_len, ref_len, options);
}

std::vector<std::string> model_garden_bleu_tokenize(const std::string& line) {
  // Unlike sacreBLEU's intl, a punctuation mark only stays attached to Nd digits
  // (Python re's \d), not to every number.
  std::u32string s = decode_utf8(line);
  s = split_pair(s, is_not_decimal, is_punctuation, /*space_after=*/true);
  s = split_pair(s, is_punctuation, is_not_decimal, /*space_after=*/false);
  s = pad_each(s, is_symbol);
  return split_whitespace(s);
}

float model_garden_bleu(const std::vector<std::string>& references,
                        const std::vector<std::string>& hypotheses, bool case_sensitive) {
  if (references.size() != hypotheses.size())
    throw Error("reference and translation have different numbers of lines (" +
                std::to_string(references.size()) + " vs " + std::to_string(hypotheses.size()) +
                ")");
  constexpr int kMaxOrder = 4;
  std::vector<int64_t> matches(kMaxOrder, 0), possible(kMaxOrder, 0);
  int64_t reference_length = 0, translation_length = 0;
  for (std::size_t i = 0; i < references.size(); ++i) {
    const auto ref = model_garden_bleu_tokenize(case_sensitive ? references[i]
                                                               : unicode_lowercase(references[i]));
    const auto hyp = model_garden_bleu_tokenize(case_sensitive ? hypotheses[i]
                                                               : unicode_lowercase(hypotheses[i]));
    reference_length += static_cast<int64_t>(ref.size());
    translation_length += static_cast<int64_t>(hyp.size());
    const NgramCounts hyp_counts = count_ngrams(hyp, kMaxOrder);
    for (const auto& [ngram, count] : count_ngrams(ref, kMaxOrder)) {
      const auto found = hyp_counts.find(ngram);
      if (found != hyp_counts.end()) matches[order_of(ngram) - 1] += std::min(count, found->second);
    }
    for (const auto& [ngram, count] : hyp_counts) possible[order_of(ngram) - 1] += count;
  }

  // compute_bleu: an order with no match gets 1 / (2^k * possible), k counting such
  // orders so far; an order with nothing possible contributes nothing to the log sum
  // but still counts in the divisor.
  std::vector<double> precisions(kMaxOrder, 0.0);
  double smooth = 1.0;
  for (int i = 0; i < kMaxOrder; ++i) {
    if (possible[i] == 0) continue;
    if (matches[i] > 0) {
      precisions[i] = static_cast<double>(matches[i]) / static_cast<double>(possible[i]);
    } else {
      smooth *= 2;
      precisions[i] = 1.0 / (smooth * static_cast<double>(possible[i]));
    }
  }
  double geo_mean = 0;
  if (*std::max_element(precisions.begin(), precisions.end()) > 0) {
    double log_sum = 0;
    for (double p : precisions)
      if (p > 0) log_sum += std::log(p);
    geo_mean = std::exp(log_sum / kMaxOrder);
  }
  // Python divides by zero here; say so instead.
  if (reference_length == 0) throw Error("model_garden_bleu: the references have no tokens");
  const double ratio =
      static_cast<double>(translation_length) / static_cast<double>(reference_length);
  const double bp = ratio < 1e-6 ? 0.0 : ratio < 1.0 ? std::exp(1.0 - 1.0 / ratio) : 1.0;
  // np.float32(bleu) * 100 stays float32.
  return static_cast<float>(geo_mean * bp) * 100.0f;
}

}  // namespace garden::nlp
