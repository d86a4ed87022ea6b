// gp_geom is nn/ops's convGeom (ConvGeom in conv.go): one image's convolution or pooling
// geometry, shared by the kernels of every level.
#ifndef GP_GEOM_H
#define GP_GEOM_H
typedef struct {
	int C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW;
} gp_geom;
#endif
