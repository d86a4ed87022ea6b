package ops

import "strconv"

var kindNames = [...]string{
	KindLinear:                   "Linear",
	KindLinearGradX:              "LinearGradX",
	KindLinearGradW:              "LinearGradW",
	KindBiasGrad:                 "BiasGrad",
	KindConv2d:                   "Conv2d",
	KindConv2dGradX:              "Conv2dGradX",
	KindConv2dGradW:              "Conv2dGradW",
	KindBatchNorm:                "BatchNorm",
	KindBatchNormGrad:            "BatchNormGrad",
	KindLayerNorm:                "LayerNorm",
	KindLayerNormGrad:            "LayerNormGrad",
	KindNormGradGamma:            "NormGradGamma",
	KindNormGradBeta:             "NormGradBeta",
	KindReLU:                     "ReLU",
	KindGELU:                     "GELU",
	KindReLUGrad:                 "ReLUGrad",
	KindGELUGrad:                 "GELUGrad",
	KindAddReLU:                  "AddReLU",
	KindAdd:                      "Add",
	KindReduce:                   "Reduce",
	KindExpand:                   "Expand",
	KindCrossEntropy:             "CrossEntropy",
	KindCrossEntropyGrad:         "CrossEntropyGrad",
	KindMaxPool2d:                "MaxPool2d",
	KindMaxPool2dGrad:            "MaxPool2dGrad",
	KindAvgPool:                  "AvgPool",
	KindAvgPoolGrad:              "AvgPoolGrad",
	KindDropout:                  "Dropout",
	KindDropoutGrad:              "DropoutGrad",
	KindSoftmax:                  "Softmax",
	KindSoftmaxGrad:              "SoftmaxGrad",
	KindWindowAttention:          "WindowAttention",
	KindWindowAttentionGrad:      "WindowAttentionGrad",
	KindWindowAttentionTableGrad: "WindowAttentionTableGrad",
	KindGatherRows:               "GatherRows",
	KindScatterAddRows:           "ScatterAddRows",
	KindPermute:                  "Permute",
}

// String is the kind's name without its prefix ("Conv2dGradX"), or "Kind(n)" for a value
// that is not a kind.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}
