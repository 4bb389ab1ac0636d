#!/usr/bin/env python3
"""Quality-per-time peer for the translation task, in Python PyTorch.

Trains the tiny pre-layer-norm Transformer (d 256, 3+3 layers, 4 heads, ffn
1024, joint SentencePiece unigram vocab of 8000) on gettext-en-de (this
repository's data/translation/en_de_train.tsv) with token-budget batches
sorted by length, Adam (0.9, 0.98, 1e-9), inverse-square-root schedule with
800 warmup steps, label smoothing 0.1, gradient clipping 1.0, for BUDGET
seconds of wall time, and after each epoch decodes
data/translation/en_de_valid.tsv greedily and prints its sacreBLEU (or,
without the sacrebleu module, writes the hypotheses to /tmp/peer_hyp.txt for
`garden bleu`).

Usage: /usr/bin/python3 peer_translation_quality.py BUDGET_SECONDS
Needs: apt-get install -y python3-torch python3-sentencepiece
Seen on this 2-core machine: sacreBLEU 0.5, 10.5, 12.3, 21.2 after epochs
1-4, the fourth ending 24.5 minutes after the start of training.
"""
import sys, time, math, random, os, torch, sentencepiece as spm
try:
    import sacrebleu
except ImportError:
    sacrebleu = None
torch.manual_seed(0); random.seed(0)
D=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','..','data','translation')+'/'
train=[l.rstrip('\n').split('\t') for l in open(D+'en_de_train.tsv',encoding='utf-8')]
valid=[l.rstrip('\n').split('\t') for l in open(D+'en_de_valid.tsv',encoding='utf-8')]
with open('/tmp/peer_spm.txt','w') as f:
    for s,t in train: f.write(s+'\n'+t+'\n')
spm.SentencePieceTrainer.train(input='/tmp/peer_spm.txt', model_prefix='/tmp/peer_sp', vocab_size=8000, model_type='unigram', character_coverage=1.0, pad_id=0, unk_id=3, bos_id=-1, eos_id=1, user_defined_symbols=[])
sp=spm.SentencePieceProcessor(model_file='/tmp/peer_sp.model')
V=sp.get_piece_size(); EOS=1
enc=lambda s: sp.encode(s)[:63]+[EOS]
data=[(enc(s),enc(t)) for s,t in train]
d,L,h,ff=256,3,4,1024
class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.emb=torch.nn.Embedding(V,d,padding_idx=0)
        torch.nn.init.normal_(s.emb.weight,0,d**-0.5)
        s.tx=torch.nn.Transformer(d,h,L,L,ff,dropout=0.1,batch_first=True,norm_first=True)
        pos=torch.arange(256).unsqueeze(1)*torch.exp(torch.arange(0,d,2)*(-math.log(10000.0)/d))
        s.register_buffer('pe',torch.cat([torch.sin(pos),torch.cos(pos)],1))
    def embed(s,x): return s.emb(x)*math.sqrt(d)+s.pe[:x.shape[1]]
    def encode(s,src): return s.tx.encoder(s.embed(src),src_key_padding_mask=(src==0))
    def decode(s,mem,src,tin):
        T=tin.shape[1]; causal=torch.triu(torch.full((T,T),float('-inf')),1)
        y=s.tx.decoder(s.embed(tin),mem,tgt_mask=causal,tgt_key_padding_mask=(tin==0)&(torch.arange(T)>0),memory_key_padding_mask=(src==0))
        return y@s.emb.weight.t()
m=M(); opt=torch.optim.Adam(m.parameters(),lr=1.0,betas=(0.9,0.98),eps=1e-9)
warm=800; sched=torch.optim.lr_scheduler.LambdaLR(opt,lambda st: 0.7*d**-0.5*min((st+1)**-0.5,(st+1)*warm**-1.5))
def batches():
    idx=sorted(range(len(data)),key=lambda i:(len(data[i][0])+len(data[i][1])+random.random()))
    bs=[]; cur=[]; mx=0
    for i in idx:
        l=max(len(data[i][0]),len(data[i][1])+1)
        if cur and max(mx,l)*(len(cur)+1)>3000: bs.append(cur); cur=[]; mx=0
        cur.append(i); mx=max(mx,l)
    if cur: bs.append(cur)
    random.shuffle(bs); return bs
def pad(seqs):
    T=max(len(x) for x in seqs); return torch.tensor([x+[0]*(T-len(x)) for x in seqs])
def greedy(srcs):
    m.eval(); out=[]
    with torch.no_grad():
        for i in range(0,len(srcs),100):
            src=pad([enc(s) for s in srcs[i:i+100]]); mem=m.encode(src)
            ys=torch.zeros(src.shape[0],1,dtype=torch.long); done=torch.zeros(src.shape[0],dtype=torch.bool)
            for _ in range(min(80,src.shape[1]+20)):
                nxt=m.decode(mem,src,ys)[:,-1].argmax(-1); nxt[done]=0
                ys=torch.cat([ys,nxt[:,None]],1); done|=nxt==EOS
                if done.all(): break
            for row in ys[:,1:].tolist():
                row=row[:row.index(EOS)] if EOS in row else row
                out.append(sp.decode([t for t in row if t>2]))
    m.train(); return out
budget=float(sys.argv[1]); t0=time.time(); step=0; ntok=0; ev=[]
while time.time()-t0<budget:
    for b in batches():
        src=pad([data[i][0] for i in b]); tgt=pad([data[i][1] for i in b])
        tin=torch.cat([torch.zeros(len(b),1,dtype=torch.long),tgt[:,:-1]],1)
        logits=m.decode(m.encode(src),src,tin)
        loss=torch.nn.functional.cross_entropy(logits.reshape(-1,V),tgt.reshape(-1),ignore_index=0,label_smoothing=0.1)
        opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(),1.0); opt.step(); sched.step(); step+=1
        ntok+=int((src>0).sum()+(tgt>0).sum())
        if step%200==0: print(f"{time.time()-t0:.0f}s step {step} loss {loss.item():.3f} tok/s {ntok/(time.time()-t0):.0f}",flush=True)
        if time.time()-t0>budget: break
    hyp=greedy([s for s,t in valid])
    if sacrebleu:
        b=sacrebleu.corpus_bleu(hyp,[[t for s,t in valid]])
        print(f"{time.time()-t0:.0f}s epoch-end step {step} valid sacreBLEU {b.score:.2f}",flush=True)
    else:
        open('/tmp/peer_hyp.txt','w').write('\n'.join(hyp)+'\n')
        print(f"{time.time()-t0:.0f}s epoch-end step {step} hypotheses in /tmp/peer_hyp.txt",flush=True)
